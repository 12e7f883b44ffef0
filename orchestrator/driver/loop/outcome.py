"""What a sweep reports while it runs and when it stops."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from orchestrator.records import TrialRecord
from orchestrator.trial_events import PhaseEvent


@dataclass
class Progress:
    done: int = 0
    running: int = 0
    pruned_oom: int = 0
    failed: int = 0
    best_tok_s: float | None = None
    best_number: int | None = None
    # How the progress line names the answer so far: "trial 10", "median of trials 4, 10"; '' before one
    # (or after --resume, until the journal's records give it)
    best_name: str = ""
    best_launches: int = 0  # the answer's launches: above one its figure is their median, which can fall
    phases: dict[int, PhaseEvent] = field(default_factory=dict)  # running trials by number
    # Every phase event as it came, for the printer that writes one line per event (several can come
    # between two prints: the latest alone lost the capture of a quick start-up); it empties this.
    unshown: list[PhaseEvent] = field(default_factory=list)

    def file(self, event: PhaseEvent) -> None:
        """Take a trial's phase event, unless it is older than the phase already taken for the same launch:
        the channel's async actor can hand over two events sent a moment apart swapped, and the older
        one would show the trial going back a phase."""
        last = self.phases.get(event.number)
        if last is not None and last.started_unix == event.started_unix and event.at_unix < last.at_unix:
            return
        self.phases[event.number] = event
        self.unshown.append(event)

    def absorb(self, earlier: Progress) -> None:
        """Take the counts an earlier invocation reached (--resume)."""
        self.done, self.pruned_oom, self.failed = earlier.done, earlier.pruned_oom, earlier.failed
        self.best_tok_s, self.best_number = earlier.best_tok_s, earlier.best_number
        self.best_name, self.best_launches = earlier.best_name, earlier.best_launches


class StopReason(StrEnum):
    """Why a sweep stopped launching trials."""

    BUDGET_DONE = "budget_done"  # every trial of the budget ran
    TIME_BUDGET = "time_budget"  # --time-budget ran out; running trials finished
    ONLY_REPEATS = "only_repeats"  # the sampler kept proposing configurations already measured
    SPACE_EXHAUSTED = "space_exhausted"  # every configuration of a finite space is measured or ruled out
    ALL_SKIPPED = "all_skipped"  # the memory model ruled out almost every proposal
    ALL_LOST = "all_lost"  # launch after launch died with its worker or node
    ANSWER_KNOWN = "answer_known"  # the proposal policy: the leader is separated, no untried tree can beat it

    def explain(self) -> str:
        return {
            StopReason.BUDGET_DONE: "the trial budget is spent",
            StopReason.TIME_BUDGET: "the time budget ran out (no new trial after --time-budget seconds)",
            StopReason.ONLY_REPEATS: "the sampler only proposed configurations already measured: "
            "the space is exhausted at this budget",
            StopReason.SPACE_EXHAUSTED: "every configuration of the search space is measured or ruled out",
            StopReason.ALL_SKIPPED: "the memory model rules out almost every proposal: widen the space "
            "(higher mem_fraction_static, smaller cuda_graph_max_bs)",
            StopReason.ALL_LOST: "launch after launch was lost with its worker or node: see the errors "
            "above and the Ray dashboard (a node short of host memory, or a worker that cannot start)",
            StopReason.ANSWER_KNOWN: "the answer is known before the budget is spent",
        }[self]


@dataclass
class SweepOutcome:
    records: list[TrialRecord] = field(default_factory=list)
    progress: Progress = field(default_factory=Progress)
    stop_reason: StopReason = StopReason.BUDGET_DONE
    stop_detail: str = ""  # why, in full, when the stop reason has more to say (ANSWER_KNOWN)
    confirm_note: str = ""  # launches the confirmation kept and did not need, said under the table
