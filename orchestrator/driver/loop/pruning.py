"""What a running trial reports: its phase (with its server, recorded for the next driver) and each
benchmark stage, reported to Optuna so that the pruner can stop a configuration already clearly worse."""

from __future__ import annotations

from collections.abc import Sequence

import optuna

from orchestrator.driver.answer.choose import measured_regime
from orchestrator.driver.answer.noise import Regime
from orchestrator.driver.loop.state import SweepState
from orchestrator.driver.store.trial_attrs import TrialAttr
from orchestrator.records import TrialRecord
from orchestrator.trial_events import PhaseEvent, TrialEvent


def prune_within(records: Sequence[TrialRecord], machine: str) -> str | None:
    """The machine whose launches alone a launch on ``machine`` is judged by (`store.pruner`), or None
    for every machine's. Where the launches so far are overhead-bound the host sets the pace (the real
    pair's tree measured 30 % less on a second H100 than on the first), so only its own machine's
    launches compare; GPU-bound launches on nodes of one kind agree within 1 %, and every node's count
    (judged per node, eight nodes would cut nothing before 32 launches)."""
    if not machine or measured_regime(records) is not Regime.OVERHEAD_BOUND:
        return None
    return machine


class StageReports(SweepState):
    def _handle_events(self, events: list[TrialEvent]) -> None:
        for event in events:
            handle = self._by_number.get(event.number)
            info = self._inflight.get(handle) if handle is not None else None
            if info is None:
                continue
            if isinstance(event, PhaseEvent):
                if event.machine and TrialAttr.MACHINE not in info.trial.user_attrs:
                    info.trial.set_user_attr(TrialAttr.MACHINE, event.machine)
                if event.server is not None:
                    self.journal.servers.record(event.number, event.server)
                self.outcome.progress.file(event)
                continue
            step, trial = event.step, info.trial
            # The best tok/s so far: monotonic in the step, as the percentile pruner expects.
            value = max(
                float(trial.user_attrs.get(TrialAttr.BEST_SO_FAR, 0.0)), event.metrics.output_tok_per_s
            )
            trial.set_user_attr(TrialAttr.BEST_SO_FAR, value)
            trial.report(value, step)
            last = step >= len(self.spec.workload.concurrency) - 1
            # After the last stage there is nothing left to save: a finished trial is never pruned.
            # A confirmation launch is never pruned: its whole point is one more full measurement.
            confirming = TrialAttr.CONFIRM_OF in trial.user_attrs
            pruning = self.spec.budget.prune
            keep_going = info.baseline or last or confirming or not pruning or not self._should_prune(trial)
            if not keep_going:
                info.pruned_at = step
            self.executor.decide(event.number, step, keep_going)

    def _should_prune(self, trial: optuna.Trial) -> bool:
        machine = str(trial.user_attrs.get(TrialAttr.MACHINE, ""))
        within = prune_within(self.outcome.records, machine)
        if within is not None and trial.user_attrs.get(TrialAttr.PRUNE_WITHIN) != within:
            trial.set_user_attr(TrialAttr.PRUNE_WITHIN, within)
        return trial.should_prune()
