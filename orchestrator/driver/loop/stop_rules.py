"""When the search stops launching: the time budget, the confirmation reserve's turn, a sampler that only
repeats, a space that cannot fit, lost nodes, a finite space settled, and an answer already known."""

from __future__ import annotations

import optuna

from orchestrator.driver.loop.outcome import StopReason
from orchestrator.driver.loop.reserve import ConfirmationReserve
from orchestrator.driver.loop.state import log
from orchestrator.driver.search.space import space_configs
from orchestrator.records import ServerConfig

# Lost launches cost no budget, so they need a limit of their own: this many in a row stop the sweep.
LOST_IN_A_ROW = 5


class StopRules(ConfirmationReserve):
    def _search_must_stop(self) -> bool:
        """Whether no new launch may start now, checked before each (a rule that holds records its
        reason; trials in flight finish)."""
        if self.deadline is not None and self.clock() >= self.deadline:
            self._stop(StopReason.TIME_BUDGET)
            return True
        if self._confirmation_due():
            return True
        if self.repeats + self.twins.waited >= 20 * self.n_trials:  # a draw that waits launches nothing
            self._stop(StopReason.ONLY_REPEATS)
            return True
        if self.skipped >= 5 * self.n_trials:
            self._stop(StopReason.ALL_SKIPPED)
            return True
        if self.lost_in_a_row >= LOST_IN_A_ROW:
            self._stop(StopReason.ALL_LOST)
            return True
        return False

    def _space_exhausted(self) -> bool:
        """Every server of a finite space (its configurations by the engine's rule, `server_of`) is
        settled (measured, or ruled out before launch) and nothing is queued: an ask could only repeat
        one, answered from the record, and on a small space the sampler would be asked thousands of times
        before the repeat limit (each TPE ask reads every trial so far). A space with a continuous range
        is never exhausted."""
        return self._unsettled() == frozenset()

    def _only_running_left(self) -> bool:
        """Every server of a finite space not yet settled is running now: an ask could only draw one of
        them, to wait for its record (`twins`), or a settled one, answered from its record; none is asked
        until one ends."""
        unsettled = self._unsettled()
        running = {self.server_of(info.config) for info in self._inflight.values()}
        return unsettled is not None and unsettled <= running

    def _unsettled(self) -> frozenset[ServerConfig] | None:
        """The finite space's servers not settled yet; None for a space that is not finite, or while
        trials are queued (they go first, whatever is settled)."""
        if self._space is None:
            try:
                self._space = frozenset(self.server_of(c) for c in space_configs(self.spec.search))
            except ValueError:  # a float range without a step: not enumerable
                self._space = frozenset()
        if not self._space or self.study.get_trials(
            deepcopy=False, states=(optuna.trial.TrialState.WAITING,)
        ):
            return None
        return self._space - self.measured.keys()

    def _answer_known(self, why: str) -> None:
        left = self.remaining()
        gpu_s = [r.result.wall_s for r in self.outcome.records if r.result.node_id and r.result.wall_s > 0]
        hours = left * (sum(gpu_s) / len(gpu_s)) * self.spec.node.gpus / 3600 if gpu_s else 0.0
        given = f"{left} of the budget's launches given back" + (
            f" (about {hours:.2f} GPU-hours)" if hours else ""
        )
        self.outcome.stop_detail = f"{why}; {given}"
        self._stop(StopReason.ANSWER_KNOWN)
        log.info("stopped early: %s", self.outcome.stop_detail)
