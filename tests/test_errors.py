"""One exception base: every kind keeps its typed fields through pickling, as Ray carries a trial's."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from orchestrator.driver.console.destinations import DestinationError
from orchestrator.driver.console.study_guard import StudyRefused
from orchestrator.driver.store.study_lock import StudyInUse
from orchestrator.errors import ErrorKind, SpecsweepError, TrialError, TrialLost
from orchestrator.footprint.shape import ShapeError, ShapeErrorKind
from orchestrator.records import FailureKind, FailureStage
from orchestrator.report.data import ReportError
from orchestrator.spec.search import SpecError


def _round_trip(err: SpecsweepError) -> SpecsweepError:
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is type(err)
    assert str(back) == str(err) and back.args == err.args
    assert back.__dict__ == err.__dict__
    return back


def test_a_trial_error_keeps_its_stage_type_words_and_traceback_through_pickling() -> None:
    try:
        raise KeyError("speculative_num_steps")
    except KeyError as raised:
        err = TrialError.from_exception(raised, FailureStage.WARMUP)
    back = _round_trip(err)
    assert isinstance(back, TrialError) and back.kind is ErrorKind.TRIAL_RAISED
    assert back.stage is FailureStage.WARMUP and back.raised_type == "KeyError"
    assert back.message == "KeyError: 'speculative_num_steps'"
    assert "Traceback" in back.detail and "test_errors.py" in back.detail
    assert back.hint  # what to do about it
    failure = back.failure()
    assert (failure.stage, failure.kind) == (FailureStage.WARMUP, FailureKind.INTERNAL_ERROR)


def test_an_exception_on_several_lines_gives_its_first_line_and_keeps_the_rest_in_the_detail() -> None:
    err = TrialError.from_exception(ValueError("first\nsecond"), FailureStage.UNDER_LOAD)
    assert err.message == "ValueError: first" and "second" in err.detail


def test_a_lost_node_is_a_node_lost_failure() -> None:
    back = _round_trip(TrialLost("the node died under the trial", stage=FailureStage.KV_ALLOCATION))
    assert isinstance(back, TrialLost) and back.kind is ErrorKind.NODE_LOST
    failure = back.failure()
    assert failure.kind is FailureKind.NODE_LOST and failure.stage is FailureStage.KV_ALLOCATION


@pytest.mark.parametrize(
    ("err", "kind"),
    [
        (SpecError("workload.concurrency: give at least one level"), ErrorKind.BAD_INPUT),
        (DestinationError("--out: not writable; give a folder you can write to"), ErrorKind.BAD_INPUT),
        (ReportError("no study in sqlite:///x.db: run a sweep first"), ErrorKind.BAD_INPUT),
        (StudyRefused("--study: a study named 'x' already exists"), ErrorKind.STUDY_REFUSED),
        (StudyInUse("driver d1 on host h, pid 1"), ErrorKind.STUDY_REFUSED),
    ],
)
def test_every_kind_is_one_base_and_pickles_with_its_kind(err: SpecsweepError, kind: ErrorKind) -> None:
    back = _round_trip(err)
    assert isinstance(back, SpecsweepError) and back.kind is kind


def test_a_subclass_whose_init_takes_other_arguments_still_pickles_with_its_fields() -> None:
    err = ShapeError(Path("/m/config.json"), "hidden_size", ShapeErrorKind.MISSING_FIELD, "missing; add it")
    back = _round_trip(err)
    assert isinstance(back, ShapeError) and isinstance(back, ValueError)
    assert (back.path, back.field, back.problem) == (Path("/m/config.json"), "hidden_size", err.problem)


def test_a_hint_is_said_after_the_message() -> None:
    assert str(SpecsweepError("model.path: no such folder", hint="fix model.path")) == (
        "model.path: no such folder; fix model.path"
    )
