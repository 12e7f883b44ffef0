"""A trial whose node returned no result: the node or its worker died (lost: free, and tried once more
elsewhere), or specsweep's own trial code raised (counted, never re-queued)."""

from __future__ import annotations

import time

from orchestrator.driver.loop import without_launch
from orchestrator.driver.loop.state import InFlight, SweepState, log
from orchestrator.driver.store.study import requeue
from orchestrator.errors import TrialError, TrialLost
from orchestrator.records import TrialResult


class NoResult(SweepState):
    def _lost(self, info: InFlight, err: TrialLost) -> TrialResult:
        """The node or the worker died under the trial: not an OOM, and worth one more try elsewhere."""
        log.error("trial %d lost: %s", info.trial.number, err)
        if not info.requeued:
            requeue(self.study, info.trial, info.baseline)
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
