"""An answer left with fewer launches than the confirmation asks for says so, and how to confirm it.

Seen on the simulated node (`confirm_top: 1`, `confirm_repeats: 2`, 6 trials): the one launch kept for
the confirmation relaunched s3k1d4, ranked first; its relaunch measured lower, and s3k2d4, launched once,
became the answer: "confidence: 1 launch against 2 ... too close to call", with nothing said of why the
answer was not confirmed, nor of the resume that confirms it."""

from __future__ import annotations

from orchestrator.cli_parts.wrap_up import unconfirmed_note
from orchestrator.spec.sweep_spec import BudgetSpec

BUDGET = BudgetSpec(trials=6, confirm_top=1, confirm_repeats=2)


def test_an_answer_the_confirmation_left_short_says_why_and_the_command() -> None:
    note = unconfirmed_note(launches=1, nospec=False, budget=BUDGET, reserved=1, more=lambda n: f"RESUME {n}")
    assert note.startswith("note: the answer stands on 1 launch, fewer than the 2 the confirmation asks for")
    assert note.endswith("to confirm it: RESUME 1"), note


def test_nothing_is_said_when_the_answer_is_confirmed_or_needs_no_confirmation() -> None:
    assert unconfirmed_note(launches=2, nospec=False, budget=BUDGET, reserved=1, more=str) == ""
    assert unconfirmed_note(launches=1, nospec=True, budget=BUDGET, reserved=1, more=str) == ""
    no_confirmation = BudgetSpec(trials=6, confirm_top=2, confirm_repeats=1)
    assert unconfirmed_note(launches=1, nospec=False, budget=no_confirmation, reserved=0, more=str) == ""


def test_an_answer_a_small_budget_kept_nothing_to_confirm_says_the_command_that_confirms_it() -> None:
    """Seen with `make sweep ARGS="--study t5 --trials 5"`: "warning: no confirmation launches: 5 trial(s)
    cannot spare 4 ..." at the start, then, after the table, "best: trial 5, 1052.9 tok/s" on one launch,
    "too close to call", and no word of the confirmation or of the command that gives it. The resumed
    budget must hold the confirmation (2 configurations x 2 more launches) and keep half for the search."""
    budget = BudgetSpec(trials=5, confirm_top=2, confirm_repeats=3)
    note = unconfirmed_note(
        launches=1, nospec=False, budget=budget, reserved=0, more=lambda n: f"RESUME +{n}", searched=5
    )
    assert note == (
        "note: the answer stands on 1 launch: this budget kept none to confirm it (budget.confirm_top 2 "
        "configurations to budget.confirm_repeats 3 launches each, while half the budget stays with the "
        "search); to confirm it: RESUME +4"
    ), note
    # a budget of 3 searched launches: 5 more, so that the 4 kept are at most half of the 8
    short = unconfirmed_note(
        launches=1, nospec=False, budget=budget, reserved=0, more=lambda n: f"RESUME +{n}", searched=3
    )
    assert short.endswith("RESUME +5"), short
