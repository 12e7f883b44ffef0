"""What the parts of the `Sweep` share: a trial in flight, and the state every part reads and writes.

`Sweep` is one object made of parts in their own modules (its stop rules, the deadline and the
confirmation reserve, the study's first steps and --resume, the stage reports and pruning); each part is a
class over this state, so that what one part may touch is written down once, here, and `Sweep` (in
`sweep.py`) is what ties them together: the wiring and the loop.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial

from orchestrator.driver.dispatch import quarantine
from orchestrator.driver.dispatch.executor import Executor, Handle
from orchestrator.driver.loop import observers as obs
from orchestrator.driver.loop.lossless import LosslessCheck
from orchestrator.driver.loop.outcome import StopReason, SweepOutcome
from orchestrator.driver.loop.settle import Settled
from orchestrator.driver.loop.twins import Twins
from orchestrator.driver.memory.learned import MemoryModel
from orchestrator.driver.proposal.policy import ProposalPolicy
from orchestrator.driver.store.journal import Journal
from orchestrator.driver.store.study_lock import DriverLease
from orchestrator.driver.store.tracking import Tracker
from orchestrator.records import ServerConfig, TrialResult
from orchestrator.spec.sweep_spec import SweepSpec

log = logging.getLogger("orchestrator.driver.loop.sweep")  # the loop's one logger, whichever part logs


@dataclass
class InFlight:
    trial: optuna.Trial
    config: ServerConfig
    started: float
    baseline: bool
    requeued: bool
    pruned_at: int | None = None


class SweepState(ABC):
    """The attributes `Sweep.__init__` sets, and the steps every part may call."""

    confirm_reserve = 0  # launches kept back for confirmation (reserve_for_confirmation)
    # The search ended early so that the reserved confirmation launches fit in the time budget.
    stopped_to_confirm = False
    confirming = False
    given_back = 0  # launches the confirmation did not need, given back to the search (confirm_best)

    spec: SweepSpec
    study: optuna.Study
    workdir: Path  # the study's folder: its journal, and each trial's folder under trials/
    lease: DriverLease | None
    n_trials: int
    executor: Executor
    outcome: SweepOutcome
    clock: Callable[[], float]
    deadline: float | None
    time_budget_s: float | None  # this invocation's, from which the deadline was set
    nodes: quarantine.NodeHealth
    skipped: int
    repeats: int
    lost_in_a_row: int
    # What was measured, by the server the engine makes of each configuration (`server_of`, its
    # `SameServer` rules): a draw of a server measured under another name is answered from its record.
    measured: obs.Measured
    server_of: Callable[[ServerConfig], ServerConfig]
    twins: Twins  # draws of a server running on another node, waiting for its record
    lossless: LosslessCheck
    journal: Journal
    tracker: Tracker
    journal_complete: bool
    speedup: obs.Speedup
    proposals: ProposalPolicy | None
    _inflight: dict[Handle, InFlight]
    _by_number: dict[int, Handle]
    _space: frozenset[ServerConfig] | None
    _best: obs.BestSoFar

    def trial_dir(self, number: int) -> Path:
        """Where trial ``number``'s node writes its files (the request's workdir): on this machine, what an
        interrupted launch left is read back from it."""
        return self.workdir / "trials" / f"{number:04d}"

    @property
    @abstractmethod
    def memory_model(self) -> MemoryModel: ...

    @abstractmethod
    def _observe(self, trial: optuna.Trial | FrozenTrial, baseline: bool, settled: Settled) -> None: ...

    @abstractmethod
    def _tell_and_record(self, info: InFlight, result: TrialResult) -> None: ...

    @abstractmethod
    def _leave_open(self, trial: optuna.Trial, closed: bool = True) -> None: ...

    @abstractmethod
    def run(self) -> SweepOutcome: ...

    def _stop(self, reason: StopReason, message: str = "") -> None:
        if self.outcome.stop_reason is StopReason.BUDGET_DONE:
            self.outcome.stop_reason = reason
            if message:
                # Said on the console by the closing lines (`stopped early: ...`), not as a log record.
                self.outcome.stop_detail = self.outcome.stop_detail or message
                log.info("%s", message)


def quietly(call: Callable[..., None], *args: Any) -> None:
    """Tear down what may be gone already; the exception on its way out (an interrupt) stays the one
    raised."""
    try:
        call(*args)
    except Exception as err:
        log.warning("while stopping: %s: %s", type(err).__name__, err)
