"""The ways a trial ends without a measurement of its own: answered from the record of its server
(a repeat), ruled out by the memory model before launch (skipped), or launched with no result from its node:
the node or its worker died (lost: free, and tried once more elsewhere), or specsweep's own trial code
raised (counted, never re-queued)."""

from __future__ import annotations

import time

import optuna

from orchestrator.driver.loop import observers as obs
from orchestrator.driver.loop import without_launch
from orchestrator.driver.loop.state import InFlight, SweepState, log
from orchestrator.driver.memory.learned import Prediction
from orchestrator.driver.store.study import requeue, tell_repeat
from orchestrator.errors import TrialError, TrialLost
from orchestrator.records import ServerConfig, TrialResult


class NoResult(SweepState):
    def _repeat(self, trial: optuna.Trial, config: ServerConfig, seen: obs.Seen) -> None:
        """TPE proposes a server it has already measured (under this name or another) once it settles:
        answer from the record instead of spending another launch (the study still learns the value)."""
        self.repeats += 1
        tell_repeat(self.study, trial, config.label(), seen)
        self._leave_open(trial)
        log.info("trial %d repeats trial %d: answered from the record", trial.number, seen[0])

    def _skip(
        self, trial: optuna.Trial, config: ServerConfig, prediction: Prediction, baseline: bool
    ) -> None:
        """Spend no GPU time on what cannot fit: the study learns it as infeasible all the same."""
        self.skipped += 1
        info = InFlight(trial, config, time.monotonic(), baseline, requeued=True)
        self._tell_and_record(info, without_launch.predicted_oom(config, prediction))

    def _lost(self, info: InFlight, err: TrialLost, requeue_it: bool = True) -> TrialResult:
        """The node or the worker died under the trial: not an OOM, and worth one more try elsewhere (a
        re-queued copy, unless `requeue_it` is False: a draw of the same server waits, and is the retry)."""
        log.error("trial %d lost: %s", info.trial.number, err)
        if not info.requeued and requeue_it:
            requeue(self.study, info.trial)
        return without_launch.lost(info.config, err, time.monotonic() - info.started)

    def _internal_error(self, info: InFlight, err: TrialError) -> TrialResult:
        """specsweep's own trial code raised: the same configuration would raise again, so the trial is
        FAILED and counted (never re-queued), and the traceback goes to the driver's log."""
        log.error(
            "trial %d: the trial code raised at %s (a bug in specsweep: please report it): %s\n%s",
            info.trial.number,
            err.stage.value,
            err.message,
            err.detail,
        )
        return without_launch.internal_error(info.config, err, time.monotonic() - info.started)
