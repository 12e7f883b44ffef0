"""The real sweep driver (`Sweep.run`) on noisy, paid oracle launches instead of a Ray cluster.

`Sweep.run` asks, predicts, skips, submits, reads stage reports, prunes, tells and records; it reaches the
trials only through its `Executor` (`orchestrator.driver.executor`). `OracleExecutor` below answers at
once: a "submitted" trial is a launch drawn from the benchmark's `Launcher` (the oracle's stages with a
real node's noise), its stages are reported one at a time, and it runs the next stage only if the driver
says so, as a trial on a node does. Everything the driver decides is its own code, unchanged.

The GPU-hour budget is the product's own time budget: once the launches have spent it, the driver's
deadline is set to the past, so `Sweep.run` starts nothing new and returns, as on a real cluster.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, cast

from optuna.storages import InMemoryStorage

from benchmarks.noise import Launcher
from benchmarks.oracle import Evaluation
from orchestrator.driver.executor import Handle
from orchestrator.driver.settle import objective_value
from orchestrator.driver.study import open_study
from orchestrator.driver.sweep import Sweep
from orchestrator.mlflow_schema import TrialRecord
from orchestrator.node.trial import TrialRequest
from orchestrator.placement import TRIAL_SLOT
from orchestrator.records import TrialResult, TrialStatus
from orchestrator.spec import SweepSpec
from orchestrator.tracking import Tracker
from orchestrator.trial_events import StageReport, TrialEvent

NODE_ID = "oracle-node"


class TrialRef:
    """One submitted trial: its drawn launch and how far through its stages the driver has let it go."""

    def __init__(self, number: int, evaluation: Evaluation, on_done: Callable[[TrialRef], None]) -> None:
        self.number = number
        self.evaluation = evaluation
        self.step = 0  # the next stage to report
        self.reported = False
        self.stages_run = 0
        self.done = not evaluation.stages  # a failed start-up has nothing to report
        self._on_done = on_done
        self._paid = False

    def result(self) -> TrialResult:
        result = self.evaluation.result(self.stages_run, node_id=NODE_ID)
        if not self._paid:
            self._paid = True
            self._on_done(self)
        return result


class OracleExecutor:
    """The driver's `Executor`, answered in the driver's own thread: a submitted trial is a launch drawn
    from the launcher, its stages are reported one at a time, and it runs the next stage only if the
    driver says so, as a trial on a node does. Once the launches have spent `stop_at_gpu_s`, the sweep's
    deadline is set to the past (the product's own time budget)."""

    def __init__(self, sweep: Sweep, launcher: Launcher, stop_at_gpu_s: float) -> None:
        self.sweep = sweep
        self.launcher = launcher
        self.stop_at_gpu_s = stop_at_gpu_s
        self.refs: dict[int, TrialRef] = {}
        gpus = float(launcher.oracle.gpus)
        self._node = {"NodeID": NODE_ID, "Alive": True, "Resources": {TRIAL_SLOT: 1.0, "GPU": gpus}}

    def open(self) -> None:
        pass

    def trial_slots(self) -> int:
        return 1

    def alive_nodes(self) -> list[dict[str, Any]]:
        return [self._node]

    def submit(self, request: TrialRequest, node_id: str) -> Handle:
        ref = TrialRef(request.number, self.launcher.measure(request.config), self._paid)
        self.refs[request.number] = ref
        return ref

    def wait(self, handles: Sequence[Handle], timeout_s: float) -> tuple[list[Handle], list[TrialEvent]]:
        # A finished trial first, one at a time; otherwise every stage waiting to be reported.
        done = [h for h in handles if cast(TrialRef, h).done]
        if done:
            return done[:1], []
        reports: list[TrialEvent] = []
        for ref in self.refs.values():
            if not ref.done and not ref.reported:
                ref.reported = True
                reports.append(StageReport(ref.number, ref.step, ref.evaluation.stages[ref.step], 0.0))
        return [], reports

    def result(self, handle: Handle) -> TrialResult:
        return cast(TrialRef, handle).result()

    def decide(self, number: int, step: int, keep_going: bool) -> None:
        ref = self.refs[number]
        ref.stages_run = step + 1
        if keep_going and step + 1 < len(ref.evaluation.stages):
            ref.step, ref.reported = step + 1, False
        else:
            ref.done = True

    def node_health(self, lines: list[str]) -> None:
        pass

    def cancel(self, handle: Handle) -> None:
        pass

    def close(self) -> None:
        pass

    def _paid(self, ref: TrialRef) -> None:
        ev = ref.evaluation
        pruned = ev.status is TrialStatus.OK and ref.stages_run < len(ev.stages)
        result = ev.result(ref.stages_run, node_id=NODE_ID)
        measured = (
            None if pruned or ev.status is not TrialStatus.OK else objective_value(result, self.sweep.spec)
        )
        self.launcher.pay(ev, stages_run=ref.stages_run, objective=measured)
        if self.launcher.spent_s >= self.stop_at_gpu_s:
            self.sweep.deadline = -math.inf  # the product's time budget, spent: no new launch


class _Unset:
    """The executor of a sweep not yet given its launcher: any use is a mistake."""

    def __getattr__(self, name: str) -> Any:
        raise RuntimeError("run the oracle sweep with run_on_oracle(sweep, launcher)")


class _NoTracking:
    """MLflow stays out of the search benchmark: it measures decisions, not logging."""

    def log_trial(self, record: TrialRecord) -> str | None:
        return None


def oracle_sweep(spec: SweepSpec, n_trials: int) -> Sweep:
    """A `Sweep` on an in-memory study (the same `open_study`), ready for `run_on_oracle`."""
    # `open_study` takes a storage URL; an in-memory storage object serves as well and is much faster.
    study = open_study(spec, spec.name, InMemoryStorage(), resume=False)
    sweep = Sweep(
        spec,
        study,
        cast(Tracker, _NoTracking()),
        n_trials=n_trials,
        workdir=Path("unused"),  # no trial runs in a folder: the oracle answers in process
        sim_profile=None,
        executor=_Unset(),
    )
    sweep.journal.folder = None  # never resumed: nothing is written
    return sweep


def run_on_oracle(sweep: Sweep, launcher: Launcher, stop_at_gpu_s: float = math.inf) -> list[TrialRecord]:
    """`prepare` then `run`, exactly as the CLI does, with the trials launched through `launcher`."""
    sweep.executor = OracleExecutor(sweep, launcher, stop_at_gpu_s)
    sweep.prepare(resume=False)
    return sweep.run().records
