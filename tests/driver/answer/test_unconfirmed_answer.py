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


def test_nothing_is_said_when_the_answer_is_confirmed_or_nothing_was_kept() -> None:
    assert unconfirmed_note(launches=2, nospec=False, budget=BUDGET, reserved=1, more=str) == ""
    assert unconfirmed_note(launches=1, nospec=False, budget=BUDGET, reserved=0, more=str) == ""
    assert unconfirmed_note(launches=1, nospec=True, budget=BUDGET, reserved=1, more=str) == ""
