"""The product's sweep, end to end (`Sweep.prepare`, `run`, `confirm_best`), on noisy, paid oracle launches
instead of a Ray cluster, answering as the CLI answers.

`Sweep.run` asks, predicts, skips, submits, reads stage reports, prunes, tells and records; it reaches the
trials only through its `Executor` (`orchestrator.driver.dispatch.executor`). `OracleExecutor` below
answers at once: a "submitted" trial is a launch drawn from the benchmark's `Launcher` (the oracle's
stages with a real node's noise), its stages are reported one at a time, and it runs the next stage only
if the driver says so, as a trial on a node does. Everything the driver decides is its own code, unchanged:
the confirmation launches it reserves and queues, and the answer (`driver.answer.conclusion.sweep_answer`,
what the CLI prints as `best:` and writes to best.json).

The GPU-hour budget is the product's own time budget: the sweep's clock is the node time the launches
have spent, so `Sweep` ends its search when its reserved confirmation launches would no longer fit, and
starts nothing once the budget is spent, as on a real node with `--time-budget`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import cast

from optuna.storages import InMemoryStorage

from benchmarks.launches.noisy import Launcher
from benchmarks.truth.oracle import Evaluation
from orchestrator.driver.answer.conclusion import sweep_answer
from orchestrator.driver.answer.confirm import measured
from orchestrator.driver.dispatch.executor import Handle, OneNodeExecutor
from orchestrator.driver.loop.sweep import Sweep
from orchestrator.driver.store.study import open_study
from orchestrator.driver.store.tracking import Tracker
from orchestrator.records import ServerConfig, TrialRecord, TrialResult
from orchestrator.spec.sweep_spec import SweepSpec
from orchestrator.trial_events import StageReport, TrialEvent, TrialRequest

NODE_ID = "oracle-node"


class TrialRef:
    """One submitted trial: its drawn launch and how far through its stages the driver has let it go."""

    def __init__(self, number: int, evaluation: Evaluation) -> None:
        self.number = number
        self.evaluation = evaluation
        self.step = 0  # the next stage to report
        self.reported = False
        self.stages_run = 0
        self.done = not evaluation.stages  # a failed start-up has nothing to report
        self.paid = False

    def result(self) -> TrialResult:
        return self.evaluation.result(self.stages_run, node_id=NODE_ID)


class OracleExecutor(OneNodeExecutor):
    """The driver's `Executor`, answered in the driver's own thread: a submitted trial is a launch drawn
    from the launcher, its stages are reported one at a time, and it runs the next stage only if the
    driver says so, as a trial on a node does. A launch is paid once the sweep has recorded it
    (`recorded`), so the recommendation the launcher notes after it is the sweep's answer with it."""

    def __init__(self, launcher: Launcher) -> None:
        super().__init__(NODE_ID, float(launcher.oracle.gpus))
        self.launcher = launcher
        self.refs: dict[int, TrialRef] = {}

    def clock(self) -> float:
        """The sweep's clock: node seconds the launches have spent (one node: GPU seconds / GPUs)."""
        return self.launcher.spent_s / self.launcher.oracle.gpus

    def submit(self, request: TrialRequest, node_id: str) -> Handle:
        ref = TrialRef(request.number, self.launcher.measure(request.config))
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

    def recorded(self, record: TrialRecord) -> None:
        """The sweep recorded a trial: pay for its launch (skips and answered repeats launched nothing)
        with the value the product measured (None when it failed, was pruned or missed a limit)."""
        ref = self.refs.get(record.number)
        if ref is None or ref.paid:
            return
        ref.paid = True
        value = record.objective if measured([record]) else None
        self.launcher.pay(ref.evaluation, stages_run=ref.stages_run, objective=value)


class NoTracking:
    """MLflow stays out of the search benchmark: it measures decisions, not logging."""

    def log_trial(self, record: TrialRecord) -> str | None:
        return None


def oracle_sweep(spec: SweepSpec, launcher: Launcher, n_trials: int | None = None) -> Sweep:
    """A `Sweep` built as the CLI builds it, on an in-memory study (the same `open_study`), its trials
    launched through `launcher` and the launcher's GPU-hour budget as its time budget (`--time-budget`);
    `n_trials` (the trial budget) defaults to the launcher's launch cap. The launcher notes the sweep's
    answer after each launch."""
    # `open_study` takes a storage URL; an in-memory storage object serves as well and is much faster.
    study = open_study(spec, spec.name, InMemoryStorage(), resume=False)
    executor = OracleExecutor(launcher)
    budget_s = launcher.budget_gpu_s / launcher.oracle.gpus
    sweep = Sweep(
        spec,
        study,
        cast(Tracker, NoTracking()),
        n_trials=n_trials or launcher.max_launches,
        workdir=Path("unused"),  # no trial runs in a folder: the oracle answers in process
        sim_profile=None,
        on_record=executor.recorded,
        time_budget_s=budget_s if math.isfinite(budget_s) else None,
        executor=executor,
        clock=executor.clock,
    )
    sweep.journal.folder = None  # never resumed: nothing is written
    launcher.rule = lambda launches: answer_config(sweep)
    return sweep


def answer_config(sweep: Sweep) -> ServerConfig | None:
    """The configuration the CLI would print as `best:` for the sweep's records so far: the launch its
    answer names as representative (the median one) ran it."""
    records = sweep.outcome.records
    answer = sweep_answer(records, sweep.lossless.lossy)
    if answer is None:
        return None
    return next(r.result.config for r in records if r.number == answer.representative)


def run_on_oracle(sweep: Sweep) -> list[TrialRecord]:
    """What the CLI runs: `prepare`, `reserve_for_confirmation`, `run`, `confirm_best`; returns the
    sweep's records, confirmation launches included."""
    sweep.prepare(resume=False)
    sweep.reserve_for_confirmation()
    sweep.run()
    return sweep.confirm_best().records
