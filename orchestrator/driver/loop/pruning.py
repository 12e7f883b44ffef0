"""What a running trial reports: its phase (with its server, recorded for the next driver) and each
benchmark stage, reported to Optuna so that the pruner can stop a configuration already clearly worse."""

from __future__ import annotations

from orchestrator.driver.loop.state import SweepState
from orchestrator.driver.store.trial_attrs import TrialAttr
from orchestrator.trial_events import PhaseEvent, TrialEvent


class StageReports(SweepState):
    def _handle_events(self, events: list[TrialEvent]) -> None:
        for event in events:
            handle = self._by_number.get(event.number)
            info = self._inflight.get(handle) if handle is not None else None
            if info is None:
                continue
            if isinstance(event, PhaseEvent):
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
            keep_going = info.baseline or last or confirming or not pruning or not trial.should_prune()
            if not keep_going:
                info.pruned_at = step
            self.executor.decide(event.number, step, keep_going)
