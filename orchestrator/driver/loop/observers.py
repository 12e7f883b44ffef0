"""What happens after a trial is told: each observer does one job, in order, on the same `Finished`.

Progress counts, node metrics and quarantine, the set of measured configurations, the memory model, the
diagnosis, the speed-up over the baseline, the record (and its lossless review), MLflow, and the console.
A later observer may read what an earlier one wrote on the `Finished` (the record is built from the
memory model's correction and the diagnosis), which is why the order is fixed in `default_observers`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from orchestrator import dashboard_metrics
from orchestrator.driver.answer.conclusion import sweep_answer
from orchestrator.driver.dispatch.quarantine import NodeHealth
from orchestrator.driver.loop.lossless import LosslessCheck
from orchestrator.driver.loop.outcome import Progress
from orchestrator.driver.loop.settle import Settled
from orchestrator.driver.memory.learned import MemoryModel
from orchestrator.driver.search.diagnosis import Speculation, accept_length, diagnose, speculation
from orchestrator.driver.store.journal import Journal
from orchestrator.driver.store.tracking import Tracker
from orchestrator.driver.store.trial_attrs import free_reference
from orchestrator.mlflow_schema import Tag
from orchestrator.records import ServerConfig, TrialRecord, TrialResult, TrialStatus
from orchestrator.spec.search import SearchSpace

log = logging.getLogger(__name__)

Seen = tuple[int, TrialStatus, float | None]  # the trial that measured a server: (number, status, objective)
Measured = dict[ServerConfig, Seen]  # a server (`SweepState.server_of`) -> what measured it


@dataclass
class Finished:
    """One trial, settled and told, on its way through the observers."""

    number: int
    settled: Settled
    baseline: bool
    confirm_of: int | None = None
    corrections: list[str] = field(default_factory=list)  # what the memory model learned from it
    diagnosis: str = ""
    speedup: float | None = None
    record: TrialRecord | None = None

    @property
    def result(self) -> TrialResult:
        return self.settled.result


class Observer(Protocol):
    def __call__(self, done: Finished) -> None: ...


@dataclass
class ProgressCounts:
    progress: Progress

    def __call__(self, done: Finished) -> None:
        p, status = self.progress, done.result.status
        if status.infeasible:
            p.pruned_oom += 1
        elif status is TrialStatus.INTERRUPTED:
            pass  # not a failure of its configuration: it runs again
        elif status is not TrialStatus.OK:
            p.failed += 1
        # `done` counts what the budget counts (launched_count), so it never runs past its total.
        if not status.free and not free_reference(done.baseline, done.confirm_of):
            p.done += 1


@dataclass
class NodeMetrics:
    """Ray metrics for the dashboard, and GPU hygiene quarantine (a skipped trial ran on no node)."""

    nodes: NodeHealth
    progress: Progress

    def __call__(self, done: Finished) -> None:
        result = done.result
        # Neither ran to an end on its node (an interrupted one is recorded while the driver goes down).
        if result.status not in (TrialStatus.PREDICTED_OOM, TrialStatus.INTERRUPTED):
            dashboard_metrics.record_trial_finished(result.status)
            if result.gpu_after:
                clean = "GPUs not clean" not in " ".join(result.notes)
                dashboard_metrics.record_gpu_samples(result.node_id, result.gpu_after, clean)
            if self.nodes.observe(result):
                log.error(
                    "node %s taken out of the rotation: %s", result.node_id, "; ".join(self.nodes.report())
                )


@dataclass
class MeasuredSet:
    """Configurations measured in full (or infeasible), by the server the engine makes of each
    (`server_of`): a proposal of one again, under any name, is answered from here."""

    measured: Measured
    server_of: Callable[[ServerConfig], ServerConfig]

    def __call__(self, done: Finished) -> None:
        if done.settled.measured:
            self.measured.setdefault(
                self.server_of(done.result.config), (done.number, done.result.status, done.settled.objective)
            )


@dataclass
class MemoryLearning:
    model: MemoryModel

    def __call__(self, done: Finished) -> None:
        done.corrections = [c.what for c in self.model.observe(done.number, done.result)]


@dataclass
class Diagnosis:
    """Why a trial did what it did; the draft taken for broken once it has failed on two trees and worked
    on none (one tree can simply not suit it)."""

    model: MemoryModel
    search: SearchSpace | None = None  # the study's space: advice names values of it
    best_accept: float | None = None  # the draft's best acceptance length so far
    broken_trials: int = 0  # speculative trials that accepted almost nothing
    broken_warned: bool = False

    def __call__(self, done: Finished) -> None:
        result = done.result
        done.diagnosis = diagnose(result, self.model, self.best_accept, self.search)
        # The verdict the diagnosis words, read as a value (its words may change).
        broken = (
            result.status is TrialStatus.OK and speculation(result, self.best_accept) is Speculation.BROKEN
        )
        accept = accept_length(result) if result.config.speculative else None
        if accept is not None:
            self.best_accept = max(accept, self.best_accept or accept)
        if broken:
            self.broken_trials += 1
        if self.broken_trials >= 2 and not self.broken_warned and broken:
            # The console shows the alarm on each broken trial's own line (`!!! BROKEN SPECULATION`): at
            # ERROR here it printed a second time, as a raw log line. The log has it with -v.
            self.broken_warned = True
            log.info("!!! %s", done.diagnosis)


@dataclass
class Speedup:
    baseline_tok_s: float | None = None

    def __call__(self, done: Finished) -> None:
        tok_s = done.result.output_tok_per_s
        if done.baseline and tok_s and self.baseline_tok_s is None:
            self.baseline_tok_s = tok_s  # the reference is the first launch (a race may repeat it)
        if self.baseline_tok_s and tok_s and not done.baseline:
            done.speedup = tok_s / self.baseline_tok_s


def build_record(done: Finished) -> None:
    pruned_at = done.settled.pruned_at
    tags: list[tuple[str, str]] = []
    if pruned_at is not None:
        tags.append((Tag.PRUNED_AT_STAGE.value, str(pruned_at)))
    tags += [(Tag.MEMORY_MODEL_CORRECTION.value, what) for what in done.corrections[:1]]
    if done.confirm_of is not None:
        tags.append((Tag.CONFIRM_OF.value, str(done.confirm_of)))
    done.record = TrialRecord(
        number=done.number,
        result=done.result,
        objective=done.settled.objective,
        speedup_vs_baseline=done.speedup,
        diagnosis=done.diagnosis,
        baseline=done.baseline,
        extra_tags=tuple(tags),
    )


def _record(done: Finished) -> TrialRecord:
    if done.record is None:
        raise RuntimeError("build_record must run before the observers that read the record")
    return done.record


@dataclass
class LosslessReview:
    lossless: LosslessCheck

    def __call__(self, done: Finished) -> None:
        done.record = self.lossless.review(_record(done))


@dataclass
class JournalWrite:
    journal: Journal

    def __call__(self, done: Finished) -> None:
        self.journal.write(_record(done))


@dataclass
class TrackerLog:
    tracker: Tracker

    def __call__(self, done: Finished) -> None:
        self.tracker.log_trial(_record(done))


@dataclass
class Collect:
    """The sweep's list of records, then the caller's callback (the console's trial table)."""

    records: list[TrialRecord]
    on_record: Callable[[TrialRecord], None]

    def __call__(self, done: Finished) -> None:
        record = _record(done)
        self.records.append(record)
        self.on_record(record)


@dataclass
class BestSoFar:
    """The progress line's `best`: the sweep's answer so far, by the rule the end of the sweep answers
    with (`driver.answer.conclusion.sweep_answer`: a configuration's median over its launches, the server
    without speculation when it leads beyond the noise), never one launch's maximum."""

    progress: Progress
    records: list[TrialRecord]
    lossy: set[int]

    def __call__(self, done: Finished) -> None:
        self.refresh()

    def refresh(self) -> None:
        answer = sweep_answer(self.records, self.lossy)
        if answer is None:
            return
        p = self.progress
        p.best_tok_s, p.best_number = answer.median, answer.representative
        p.best_name = answer.name() + (", no speculation" if answer.nospec else "")
        p.best_launches = len(answer.launches)
        if len(answer.launches) > 1:
            p.best_name = "median of " + p.best_name
        dashboard_metrics.record_best(answer.median)
