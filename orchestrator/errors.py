"""specsweep's own exceptions: one base, `SpecsweepError`, whose fields are typed and survive pickling.

A trial runs as a Ray task on another machine; what went wrong there must reach the driver as data (the
kind, the stage, the message, the hint), not as text the driver would have to parse back. Ray pickles an
exception raised in a task and hands it back as the cause of its `RayTaskError`: every field set here
comes back as it was (`SpecsweepError.__reduce__`), whatever a subclass's ``__init__`` takes.

The kinds, by who raises them:
- bad input (`ErrorKind.BAD_INPUT`): the spec, a flag, a destination, a model's config.json, a report's
  source; the CLI exits 2 on it before Ray starts or any GPU is claimed (`spec.search.SpecError` and its
  kind `driver.console.destinations.DestinationError`, `footprint.shape.ShapeError`,
  `report.data.ReportError`), and on the node or in the simulated server a dataset, a speculative adaptive
  config, a flag SGLang refuses or a tree a profile never measured (`bench.textdata.DatasetError`,
  `sim.tiers.TierConfigError`, `sim.args.ArgsError`, `sim.truth.UnmeasuredTree`; those that were
  `ValueError`s still are, for the callers that catch them so);
- a study refused (`ErrorKind.STUDY_REFUSED`): taken, missing, or held by another live driver
  (`driver.console.study_guard.StudyRefused`, `driver.store.study_lock.StudyInUse`);
- a trial's own code raised on the node (`ErrorKind.TRIAL_RAISED`, `TrialError`): a bug, FAILED and never
  re-queued;
- a lost node (`ErrorKind.NODE_LOST`, `TrialLost`): the worker or the node died under a trial, no result
  exists, worth one more try;
- the server under benchmark ran past a stage's deadline (`ErrorKind.SERVER_TIMEOUT`,
  `bench.client.StageTimeout`, still a `TimeoutError`): the node catches it as one and the trial ends TIMEOUT.
"""

from __future__ import annotations

import traceback
from enum import StrEnum
from typing import Any, ClassVar

from orchestrator.records import Failure, FailureKind, FailureStage

MESSAGE_CHARS = 500  # a failure's message as MLflow's tag and the console keep it


class ErrorKind(StrEnum):
    """What kind of trouble a `SpecsweepError` is: who must act, and how the CLI ends."""

    BAD_INPUT = "bad_input"  # the user fixes the spec, a flag or a file (exit 2)
    STUDY_REFUSED = "study_refused"  # the study cannot be run as asked (exit 2)
    TRIAL_RAISED = "trial_raised"  # specsweep's own trial code raised on the node: a bug to report
    NODE_LOST = "node_lost"  # the worker or the node died under a trial
    # The server under benchmark kept requests past the stage's deadline: the trial's own finding (it ends
    # TIMEOUT), neither a bug of specsweep's nor the user's input.
    SERVER_TIMEOUT = "server_timeout"


def _rebuild(cls: type[SpecsweepError], args: tuple[Any, ...], state: dict[str, Any]) -> SpecsweepError:
    """The exception back from `SpecsweepError.__reduce__`, without calling a subclass's ``__init__``
    (whose parameters need not be its fields)."""
    err = cls.__new__(cls, *args)
    err.args = args
    err.__dict__.update(state)
    return err


class SpecsweepError(Exception):
    """The base of every exception specsweep raises on purpose. `message` says what is wrong, `hint`
    (where there is one) how to fix it; ``str()`` is both, as the user reads them."""

    kind: ClassVar[ErrorKind] = ErrorKind.BAD_INPUT

    def __init__(self, message: str, *, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message}; {self.hint}" if self.hint else self.message

    def __reduce__(self) -> tuple[Any, ...]:
        # Exception's own reduce calls ``cls(*args)``, which a subclass with other parameters refuses.
        return (_rebuild, (type(self), self.args, dict(self.__dict__)))


class TrialFailure(SpecsweepError):
    """A trial ended with no result from its node; it carries the `Failure` the driver records."""

    failure_kind: ClassVar[FailureKind]

    def __init__(
        self, message: str, *, stage: FailureStage = FailureStage.UNDER_LOAD, detail: str = "", hint: str = ""
    ) -> None:
        super().__init__(message, hint=hint)
        self.stage = stage
        self.detail = detail

    def failure(self) -> Failure:
        """The classified failure, as a `TrialResult` carries it."""
        return Failure(self.stage, self.failure_kind, self.message[:MESSAGE_CHARS], self.detail)


class TrialError(TrialFailure):
    """The trial's own code raised on the node: a bug, not a lost node. It would raise again on the same
    configuration, so the trial is counted as failed and never re-queued. `raised_type` is the name of the
    exception the node's code raised; `detail` its traceback."""

    kind = ErrorKind.TRIAL_RAISED
    failure_kind = FailureKind.INTERNAL_ERROR

    def __init__(
        self,
        message: str,
        *,
        stage: FailureStage = FailureStage.UNDER_LOAD,
        raised_type: str = "",
        detail: str = "",
    ) -> None:
        super().__init__(message, stage=stage, detail=detail, hint="a bug in specsweep: please report it")
        self.raised_type = raised_type

    @classmethod
    def from_exception(cls, err: BaseException, stage: FailureStage) -> TrialError:
        """What the node's code raised, as fields: its type, the first line of its words (one line for the
        trial table), where the trial was, and its traceback (all of its words) as the detail."""
        said = str(err).strip().splitlines()
        return cls(
            f"{type(err).__name__}: {said[0]}" if said else type(err).__name__,
            stage=stage,
            raised_type=type(err).__name__,
            detail="".join(traceback.format_exception(err)),
        )


class TrialLost(TrialFailure):
    """The trial's worker or node went away: no result exists (not an OOM; worth one more try)."""

    kind = ErrorKind.NODE_LOST
    failure_kind = FailureKind.NODE_LOST
