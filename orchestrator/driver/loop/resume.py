"""A study's first steps under this driver: trials a dead driver left running are closed and shown as
interrupted, and then either --resume rebuilds what the study taught or the first trials are queued."""

from __future__ import annotations

from typing import Any

from optuna.trial import FrozenTrial

from orchestrator.driver.loop import without_launch
from orchestrator.driver.loop.restore import enqueue_first, restore
from orchestrator.driver.loop.settle import Settled, settle
from orchestrator.driver.loop.state import SweepState
from orchestrator.driver.search.space import config_from_params
from orchestrator.driver.store.study_lock import DriverStamp, close_dead_drivers_trials
from orchestrator.driver.store.trial_attrs import TrialAttr
from orchestrator.engines.logs import parse_log
from orchestrator.records import FailureStage
from orchestrator.trial_log import left_in


class Resume(SweepState):
    def prepare(self, resume: bool) -> None:
        """Close trials a dead driver left RUNNING (re-queueing their configurations); then, on --resume,
        rebuild what the study taught (also when only the free baseline finished), or queue the first."""
        stale: dict[int, tuple[FrozenTrial, Settled]] = {}

        def record_stale(t: FrozenTrial, driver: DriverStamp | None) -> dict[str, Any]:
            settled = self._settle_stale(t, driver)
            if settled is None:
                return {}
            stale[t.number] = (t, settled)
            # Its MLflow run belongs to the sweep that launched it (the dead driver's parent run).
            self.tracker.file_under(t.number, self.tracker.previous_parent_run_id)
            return settled.attrs

        me = self.lease.stamp.driver_id if self.lease else None
        close_dead_drivers_trials(self.study, me=me, attrs_of=record_stale)
        # No live driver holds the study now (the call above refuses otherwise): a recorded server still
        # running was left by a dead one, and would hold the GPUs of the trials to come.
        self.journal.servers.stop_stale()
        if resume and any(t.state.is_finished() for t in self.study.get_trials(deepcopy=False)):
            restored = restore(self.study, self.journal)
            self.outcome.progress.absorb(restored.progress)
            self.speedup.baseline_tok_s = restored.baseline_tok_s
            for config, seen in restored.measured.items():
                self.measured.setdefault(self.server_of(config), seen)
            for number, result in restored.memory:
                self.memory_model.observe(number, result)
            # Every earlier launch joins the ranking, the confirmation and the lossless check.
            self.journal_complete = len(restored.records) == len(restored.numbers)
            self.outcome.records.extend(self.lossless.restore(restored.records))
            self._best.refresh()
        else:
            enqueue_first(self.study, self.spec, self.memory_model)
        # A dead driver's launches, shown now as interrupted (the console's line, MLflow, the journal).
        for t, settled in stale.values():
            self._observe(t, bool(t.user_attrs.get(TrialAttr.BASELINE)), settled)

    def _settle_stale(self, t: FrozenTrial, driver: DriverStamp | None) -> Settled | None:
        """A trial left RUNNING by a driver that died (kill -9, a machine gone): interrupted, not counted,
        queued again (None for a trial asked with no configuration yet: it was never launched)."""
        config = config_from_params(t.params)
        if config is None:
            return None
        whose = f"its driver ({driver.describe()})" if driver is not None else "its driver"
        # Its phase died with the driver; the stages it reported are in the study, and how far its server
        # got is in the log its folder holds (read by its engine's reader).
        left = left_in(self.trial_dir(t.number))
        reported = len(t.intermediate_values)
        ready = bool(left.log_text) and parse_log(left.log_text, self.spec.engine).ready
        stage = FailureStage.UNDER_LOAD if reported or ready else FailureStage.LAUNCH
        when = (
            f"after {reported} benchmark stage(s)"
            if reported
            else "after its server was ready, before any benchmark stage ended"
            if ready
            else "before any benchmark stage ended"
        )
        why = f"{whose} stopped while it ran, {when}: not counted, its configuration is queued again"
        result = without_launch.interrupted(config, stage, why, left=left)
        return settle(result, self.spec, None)
