"""Confirmation: which configurations to launch again, and the ranking by median it follows."""

from __future__ import annotations

from dataclasses import replace

from orchestrator.driver.answer.confirm import (
    candidates,
    confirmation_note,
    rank,
    reserved_launches,
    to_confirm,
)
from orchestrator.records import StageMetrics, TrialRecord, TrialResult, TrialStatus
from orchestrator.spec.search import make_config
from orchestrator.spec.sweep_spec import BudgetSpec

A = make_config(0.85, 64, 16, 3, 1, 4)
B = make_config(0.80, 128, 32, 2, 1, 3)
C = make_config(0.90, 256, 48, 1, 1, 2)


def rec(
    number: int,
    config: object,
    tok_s: float | None,
    status: TrialStatus = TrialStatus.OK,
    pruned: bool = False,
    ci: tuple[float, float] | None = None,
) -> TrialRecord:
    stages = ()
    if tok_s is not None:
        stages = (StageMetrics(8, 16, 16, 0, 2.0, tok_s, 8.0, 30.0, 60.0, 5.0, 9.0, 6.0, 2.5,
                               output_tok_per_s_ci95=ci),)  # fmt: skip
    result = TrialResult(config=config, status=status, node_id="n", command=(), stages=stages)  # type: ignore[arg-type]
    tags = (("pruned_at_stage", "0"),) if pruned else ()
    return TrialRecord(number=number, result=result, objective=tok_s, extra_tags=tags)


def test_reserve_is_top_times_missing_repeats_and_never_over_half_the_budget() -> None:
    budget = BudgetSpec(trials=20, confirm_top=3, confirm_repeats=3)
    assert reserved_launches(budget, 20) == 6
    assert reserved_launches(budget, 12) == 6
    assert reserved_launches(budget, 11) == 0
    assert "raise budget.trials to 12" in confirmation_note(budget, 11)
    assert confirmation_note(budget, 12) == ""
    assert reserved_launches(BudgetSpec(confirm_top=0), 20) == 0
    assert confirmation_note(BudgetSpec(confirm_top=0), 4) == ""


def test_a_resumed_sweep_too_short_to_confirm_is_told_the_budget_to_resume_with() -> None:
    """A 7-trial study interrupted after 3 launches has 4 left, and a budget too small to spare 4 for
    confirmation and keep half for its search. The note once told the user to raise budget.trials, which
    a resumed study does not read; what confirms is a resume with 2 x 4 = 8 trials. (A 12-trial study
    interrupted after 6 keeps its 4: `test_confirm_resume.py`.)"""
    budget = BudgetSpec(trials=7, confirm_top=2, confirm_repeats=3)
    note = confirmation_note(budget, 4, spent=3)
    assert "the 4 trial(s) left cannot spare 4" in note
    assert "--resume --trials 8" in note and "budget.trials" not in note
    assert confirmation_note(budget, 5, spent=3) == ""  # resumed with --trials 8: it confirms


def test_the_luckiest_draw_loses_to_the_better_median() -> None:
    # A's single lucky launch is the highest figure of all; B is faster launch after launch.
    records = [rec(0, A, 1100.0), rec(1, B, 1050.0), rec(2, A, 900.0), rec(3, B, 1040.0),
               rec(4, A, 920.0), rec(5, B, 1060.0)]  # fmt: skip
    ranked = rank(records)
    assert [r.config for r in ranked] == [B, A]
    assert ranked[0].median == 1050.0 and ranked[0].numbers == (1, 3, 5)
    assert ranked[0].representative == 1
    assert ranked[1].median == 920.0 and ranked[1].representative == 4


def test_failed_pruned_and_unmeasured_launches_do_not_count() -> None:
    records = [rec(0, A, 1000.0), rec(1, A, 5000.0, pruned=True), rec(2, A, None, TrialStatus.OOM_UNDER_LOAD),
               rec(3, B, None, TrialStatus.OOM)]  # fmt: skip
    ranked = rank(records)
    assert len(ranked) == 1 and ranked[0].values == (1000.0,)


def test_to_confirm_asks_for_the_missing_launches_of_the_top_configurations() -> None:
    records = [rec(0, A, 1000.0), rec(1, B, 1100.0), rec(2, C, 900.0), rec(3, B, 1090.0)]
    budget = BudgetSpec(confirm_top=2, confirm_repeats=3)
    asked = [(c.config, n) for c, n in to_confirm(records, budget)]
    assert asked == [(B, 1), (A, 2)]
    records += [rec(4, B, 1080.0)]
    assert [(c.config, n) for c, n in to_confirm(records, budget)] == [(A, 2)]


def test_only_what_can_be_recommended_is_confirmed() -> None:
    # Seen on the simulated tiny model, whose draft accepts nothing: the baseline was the fastest and
    # took a confirmation slot, though the baseline is never the answer (nor is a lossy draft).
    base = make_config(0.85, 64, 16)
    records = [rec(0, base, 1900.0), rec(1, A, 1300.0), rec(2, B, 1500.0), rec(3, C, 1200.0)]
    records[0] = replace(records[0], baseline=True)
    budget = BudgetSpec(confirm_top=2, confirm_repeats=2)
    asked = [c.config for c, _ in to_confirm(candidates(records, lossy={2}), budget)]
    assert asked == [A, C]
