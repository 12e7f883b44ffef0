"""The time budget's deadline and the confirmation reserve: the launches a sweep keeps back from its search so
that its answer is confirmed, the moment the search must end for them to fit, and the confirmation that
spends them."""

from __future__ import annotations

import math

from optuna.trial import TrialState

from orchestrator.driver.answer import confirm
from orchestrator.driver.answer.conclusion import answer_order, confirmation_moot
from orchestrator.driver.loop.outcome import StopReason, SweepOutcome
from orchestrator.driver.loop.state import SweepState, log
from orchestrator.driver.store.study import confirmation_count, launched_count, mark_settled


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
        # The whole reserve fits before the deadline: so does any part of it, and the answer's ranking
        # (a fit of the speculation model, asked before every launch the loop fills) is not needed yet.
        most = confirm.time_to_confirm(self.outcome.records, self.confirm_reserve, slots)
        if most is None or self.clock() + most < self.deadline:
            return False
        candidates = confirm.candidates(self.outcome.records, self.lossless.lossy)
        again = confirm.relaunch_baseline(self.outcome.records, self.lossless.lossy) is not None
        order = answer_order(self.outcome.records, self.lossless.lossy)
        reserve = confirm.reserve_in_time(
            candidates,
            self.spec.budget,
            self.confirm_reserve,
            slots,
            self.time_budget_s or 0.0,
            int(again),
            order,
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
        each = need / math.ceil(reserve / slots)
        self._stop(
            StopReason.TIME_BUDGET,
            confirm.confirmation_stop_detail(self.clock(), self.deadline, reserve, each, slots),
        )
        return True

    def confirmation_needed(self) -> int | None:
        """The launches the best configurations so far still need to reach ``confirm_repeats`` (a resumed
        study's: its start says so where that is less than is kept), or None with nothing measured."""
        if not confirm.measured(self.outcome.records):
            return None
        order = answer_order(self.outcome.records, self.lossless.lossy)
        return sum(n for _, n in confirm.to_confirm(self.outcome.records, self.spec.budget, order))

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

    def confirm_best(self) -> SweepOutcome:
        """After the search: launch the top configurations again until each has ``confirm_repeats``
        launches, through the same loop (the confirmation bypasses the repeat-from-record rule). A sweep
        whose time budget ended its search left room for them (``_confirmation_due``), and one whose
        answer is known (the proposal policy's stop) has ended its search too; one that stopped early
        otherwise confirms nothing yet: its search is not over, and --resume confirms at its end. Launches
        the confirmation did not need go back to the search (``_search_with``), then it confirms again."""
        if not self._search_over():
            return self.outcome
        if confirmation_moot(self.outcome.records, self.lossless.lossy):
            log.info(
                "confirmation: none launched: the server without speculation is clearly ahead of every "
                "speculative configuration at every level, and no relaunch of one could change that"
            )
            return self._settle(self.confirm_reserve, "no relaunch could change the answer")
        self.confirming = True
        # The baseline too, when it and the configuration put first never shared a node.
        baseline = confirm.relaunch_baseline(self.outcome.records, self.lossless.lossy)
        if baseline is not None:
            log.info(
                "confirmation: the server without speculation (trial %d) launches once more, as the "
                "configuration confirmed first never ran on its node",
                baseline,
            )
        left = self.confirm_reserve
        while True:
            unneeded = self._confirmation_rounds(left, baseline)
            if unneeded is None:  # stopped under its launches: said, and left queued
                return self.outcome
            left, baseline = unneeded, None
            if not self._search_with(left):
                break
            if not self._search_over():
                return self.outcome  # the extra search was stopped: the command to continue runs the rest
            self.confirming = True
            left = self.confirm_reserve
        return self._settle(left, "the best configurations already had their launches")

    def _search_over(self) -> bool:
        """Whether the search ended where the confirmation follows: its budget spent, its answer known, or
        ended by the time budget so that the confirmation fits."""
        reason = self.outcome.stop_reason
        return reason in (StopReason.BUDGET_DONE, StopReason.ANSWER_KNOWN) or (
            reason is StopReason.TIME_BUDGET and self.stopped_to_confirm
        )

    def _confirmation_rounds(self, left: int, baseline: int | None) -> int | None:
        """Launch the confirmation from ``left`` kept launches; returns those it did not need, or None when
        it stopped under them (the time budget, lost nodes; said in the outcome's note)."""
        # In rounds, in the answer's ranking: a relaunch can move a configuration not yet confirmed to the
        # top, and the answer is then relaunched too while the reserve lasts (ranked by median alone, the
        # confirmation once relaunched a lucky runner-up and the answer kept its single launch).
        while left > 0:
            # A launch queued already (one a killed driver left running, queued again when the study was
            # resumed) runs first, out of the reserve, and the ranking follows it: planned beside it, its
            # configuration's missing launch ran twice and another's not at all.
            enqueued = min(len(self.study.get_trials(deepcopy=False, states=(TrialState.WAITING,))), left)
            if not enqueued:
                lossy = self.lossless.lossy
                candidates = confirm.candidates(self.outcome.records, lossy)
                order = answer_order(self.outcome.records, lossy)
                slots = max(self.executor.trial_slots(), 1)
                enqueued = confirm.enqueue(
                    self.study, candidates, self.spec.budget, left, baseline, order, width=slots
                )
                if not enqueued:
                    break
                baseline = None
            left -= enqueued
            # Exactly the enqueued launches: the loop asks the sampler for nothing new.
            self.n_trials = launched_count(self.study) + enqueued
            self.run()
            short = self.n_trials - launched_count(self.study)
            if short > 0:  # stopped under them (the time budget, lost nodes): said, and left queued
                why = (
                    "the time budget ended"
                    if self.outcome.stop_reason is StopReason.TIME_BUDGET
                    else "it stopped"
                )
                self.outcome.confirm_note = (
                    f"confirmation: {short} of its launches did not run before {why}; they stay queued: "
                    "the command to continue runs them first"
                )
                return None
        return left

    def _search_with(self, unneeded: int) -> bool:
        """Launches the confirmation did not need go back to the search, less what a configuration the
        search puts among the best would need to be confirmed (`confirm_repeats` - 1): they were kept
        for the budget's confirmation, not to be left unspent. Seen on the real pair: `--resume --trials
        10` kept 2 of its 3 launches for two configurations that already had theirs and finished after
        one. False where none went back (nothing left to search with, or the search itself had ended: its
        answer known, or its time budget); the launches then kept are ``confirm_reserve``."""
        keep = max(self.spec.budget.confirm_repeats - 1, 0)
        search = unneeded - keep
        if search <= 0 or self.outcome.stop_reason is not StopReason.BUDGET_DONE:
            return False
        were = "was" if unneeded == 1 else "were"
        note = (
            f"confirmation: {unneeded} of the launches kept for it {were} not needed (the best "
            f"configurations already had their launches): {search} went back to the search"
            + (f", {keep} kept to confirm a new leader" if keep else "")
        )
        log.info("%s", note)
        self.outcome.confirm_note = note
        self.given_back += search
        self.confirming = False
        self.confirm_reserve = keep
        self.n_trials = launched_count(self.study) + search
        self.run()
        return True

    def _settle(self, unneeded: int, why: str) -> SweepOutcome:
        """The search and the confirmation are over: a study that has launches of its budget left (kept
        for a confirmation that did not need them, or given back by a search whose answer was known) is
        finished on this budget, so that a later run is not told to resume a study with nothing to
        launch (it started Ray, launched nothing and answered again); a larger --trials runs more."""
        if self.outcome.stop_reason is StopReason.TIME_BUDGET:
            # The time budget cut the search: the launches it did not make are the search's, not the
            # confirmation's, and the command to continue runs them (settled, it answered "nothing to do").
            if unneeded > 0:
                were = "was" if unneeded == 1 else "were"
                self.outcome.confirm_note = (
                    f"confirmation: {unneeded} of the launches kept for it {were} not needed: {why}; they go "
                    "back to the search, which the command to continue runs"
                )
            return self.outcome
        mark_settled(self.study)  # a study that spent its whole budget is finished by that already
        if unneeded > 0:
            were = "was" if unneeded == 1 else "were"
            before = f" ({self.given_back} went back to the search before)" if self.given_back else ""
            self.outcome.confirm_note = (
                f"confirmation: {unneeded} of the launches kept for it {were} not needed: {why}; the "
                f"study is finished on this budget{before}"
            )
            log.info("%s", self.outcome.confirm_note)
        return self.outcome
