"""One exception base: every kind keeps its typed fields through pickling, as Ray carries a trial's."""

from __future__ import annotations

import ast
import asyncio
import builtins
import pickle
from pathlib import Path

import pytest

from orchestrator.bench.client import RequestOutcome, StageTimeout
from orchestrator.bench.textdata import DatasetError
from orchestrator.driver.console.destinations import DestinationError
from orchestrator.driver.console.study_guard import StudyRefused
from orchestrator.driver.store.study_lock import StudyInUse
from orchestrator.errors import ErrorKind, SpecsweepError, TrialError, TrialLost
from orchestrator.footprint.shape import ShapeError, ShapeErrorKind
from orchestrator.records import FailureKind, FailureStage
from orchestrator.report.data import ReportError
from orchestrator.sim.args import ArgsError
from orchestrator.sim.tiers import TierConfigError
from orchestrator.sim.truth import UnmeasuredTree
from orchestrator.spec.search import SpecError

PACKAGE = Path(__file__).resolve().parents[1] / "orchestrator"
SIGNALS = {"BaseException", "KeyboardInterrupt", "SystemExit", "GeneratorExit"}


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
        (DatasetError("prompts.jsonl: line 3: not valid JSON"), ErrorKind.BAD_INPUT),
        (ArgsError("Traceback ...\nValueError: bad flag"), ErrorKind.BAD_INPUT),
        (TierConfigError("speculative adaptive config must be a JSON object"), ErrorKind.BAD_INPUT),
        (UnmeasuredTree("no measured step for s9k1d10"), ErrorKind.BAD_INPUT),
    ],
)
def test_every_kind_is_one_base_and_pickles_with_its_kind(err: SpecsweepError, kind: ErrorKind) -> None:
    back = _round_trip(err)
    assert isinstance(back, SpecsweepError) and back.kind is kind


def test_a_stage_timeout_is_a_specsweep_error_and_still_the_timeout_error_the_node_catches() -> None:
    outcome = RequestOutcome(True, "", 16, 8, 0.1, 0.5, (0.05,) * 7, 4, 0, "length", 0.0, 0)
    err = StageTimeout(5.0, (outcome,), 2)
    assert isinstance(err, SpecsweepError) and err.kind is ErrorKind.SERVER_TIMEOUT
    # `node.trial_bench` catches it as a TimeoutError (asyncio's is the same class) and records a TIMEOUT.
    assert isinstance(err, TimeoutError) and isinstance(err, asyncio.TimeoutError)
    assert str(err) == "benchmark stage had 2 unfinished request(s) after 5 s" and not err.hint
    back = _round_trip(err)
    assert isinstance(back, StageTimeout) and isinstance(back, TimeoutError)
    assert (back.timeout_s, back.outcomes, back.pending) == (5.0, (outcome,), 2)


def test_a_subclass_whose_init_takes_other_arguments_still_pickles_with_its_fields() -> None:
    err = ShapeError(Path("/m/config.json"), "hidden_size", ShapeErrorKind.MISSING_FIELD, "missing; add it")
    back = _round_trip(err)
    assert isinstance(back, ShapeError) and isinstance(back, ValueError)
    assert (back.path, back.field, back.problem) == (Path("/m/config.json"), "hidden_size", err.problem)


def test_a_hint_is_said_after_the_message() -> None:
    assert str(SpecsweepError("model.path: no such folder", hint="fix model.path")) == (
        "model.path: no such folder; fix model.path"
    )


def test_the_errors_caught_as_value_errors_still_are() -> None:
    # Callers catch these as ValueError (a dataset, a tier config, a profile's table): the base is added.
    for err in (DatasetError("x"), TierConfigError("x"), UnmeasuredTree("x")):
        assert isinstance(err, ValueError) and isinstance(err, SpecsweepError)
    args = ArgsError("Traceback (most recent call last):\nValueError: bad flag")
    assert str(args) == "ValueError: bad flag" and args.traceback.startswith("Traceback")


def exception_classes() -> dict[str, set[str]]:
    """Every class the package defines, by name, with the names of its bases."""
    classes: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                bases = {
                    b.id if isinstance(b, ast.Name) else b.attr
                    for b in node.bases
                    if isinstance(b, ast.Name | ast.Attribute)
                }
                classes.setdefault(node.name, set()).update(bases)
    return classes


def test_every_exception_the_package_defines_is_a_specsweep_error() -> None:
    classes = exception_classes()
    builtin = {
        n
        for n in dir(builtins)
        if isinstance(getattr(builtins, n), type) and issubclass(getattr(builtins, n), BaseException)
    }

    def reaches(name: str, target: set[str], seen: frozenset[str] = frozenset()) -> bool:
        if name in target:
            return True
        return any(reaches(b, target, seen | {name}) for b in classes.get(name, ()) if b not in seen)

    # A signal is not an error: `Terminated` is SIGTERM as a KeyboardInterrupt, stopping as Ctrl-C does.
    raised = {n for n in classes if n != "SpecsweepError" and reaches(n, {"Exception"} | builtin - SIGNALS)}
    assert {"DatasetError", "ArgsError", "TierConfigError", "UnmeasuredTree", "ShapeError"} <= raised
    assert sorted(n for n in raised if not reaches(n, {"SpecsweepError"})) == []
