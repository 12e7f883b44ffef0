"""The time budget's deadline and the confirmation reserve: the launches a sweep keeps back from its search so
that its answer is confirmed, and the moment the search must end for them to fit."""

from __future__ import annotations

from orchestrator.driver.answer import confirm
from orchestrator.driver.answer.conclusion import confirmation_moot
from orchestrator.driver.loop.outcome import StopReason
from orchestrator.driver.loop.state import SweepState
from orchestrator.driver.store.study import confirmation_count, launched_count


class ConfirmationReserve(SweepState):
    def remaining(self) -> int:
        """Launches left in the budget."""
        return max(self.n_trials - launched_count(self.study), 0)

    def _confirmation_due(self) -> bool:
        """Whether the search must end now so that the reserved confirmation launches still fit in the
        time budget (estimated from the launches so far). Without it a sweep ended by its time budget
        answered with an unconfirmed single launch."""
        if self.deadline is None or self.confirming or self.confirm_reserve <= 0:
            return False
        # Nothing speculative measured, nothing to confirm: ending the search now answered "serve
        # without speculation" for a draft never launched. The search runs on to the deadline instead.
        if not any(r.objective is not None and r.result.config.speculative for r in self.outcome.records):
            return False
        slots = max(self.executor.trial_slots(), 1)
        candidates = confirm.candidates(self.outcome.records, self.lossless.lossy)
        again = confirm.relaunch_baseline(self.outcome.records, self.lossless.lossy) is not None
        reserve = confirm.reserve_in_time(
            candidates, self.spec.budget, self.confirm_reserve, slots, self.time_budget_s or 0.0, int(again)
        )
        need = confirm.time_to_confirm(self.outcome.records, reserve, slots)
        if need is None or self.clock() + need < self.deadline:
            return False
        # A confirmation that could not change the answer (`conclusion.confirmation_moot`) is not worth
        # ending the search for: the search runs on to the deadline, where a tree not yet tried could.
        # Asked last: it chooses the whole answer, and this runs before every launch the loop fills.
        if confirmation_moot(self.outcome.records, self.lossless.lossy):
            return False
        self.stopped_to_confirm = True
        self.confirm_reserve = reserve  # the confirmation launches what was kept for it
        self._stop(
            StopReason.TIME_BUDGET,
            f"time budget: the search ends here so that the {reserve} confirmation launches "
            f"(about {need:.0f} s) still fit",
        )
        return True

    def reserve_for_confirmation(self) -> int:
        """Keep the budget's confirmation launches back from the search (call before ``run``); returns
        how many. ``n_trials`` then counts the search's launches only, until ``confirm_best``."""
        # On --resume the half kept for the search counts the search launches an earlier invocation made
        # (stopped during its search, the study keeps the reserve its first invocation kept); only what
        # is left can be reserved, and an earlier confirmation's launches are spent.
        left = self.remaining()
        searched = launched_count(self.study) - confirmation_count(self.study)
        self.confirm_reserve = confirm.reserved_launches(self.spec.budget, searched + left, left)
        self.n_trials -= self.confirm_reserve
        return self.confirm_reserve
