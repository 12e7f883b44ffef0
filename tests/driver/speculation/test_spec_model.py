"""The speculation model recovers a known acceptance curve and step cost from synthetic trials, and
predicts trees it has not seen from them."""

from __future__ import annotations

import pytest

from orchestrator.config.draft_tree import DraftTree
from orchestrator.driver.speculation.spec_model import (
    Acceptance,
    StageSample,
    StepCost,
    fit,
    fit_acceptance,
    fit_step_cost,
    loo_error,
)

TREES = [
    DraftTree(1, 1, 2),
    DraftTree(3, 1, 4),
    DraftTree(2, 4, 5),
    DraftTree(4, 2, 7),
    DraftTree(4, 4, 5),
    DraftTree(2, 2, 3),
]
UNSEEN = [DraftTree(3, 4, 8), DraftTree(4, 1, 5), DraftTree(1, 4, 2), DraftTree(3, 2, 6)]
LEVELS = (1, 4, 16)
TRUE_ACCEPT = Acceptance(p0=0.78, decay=0.86, gain=0.3)
TRUE_COST = StepCost(
    intercept={1: 0.004, 4: 0.0045, 16: 0.006}, verify_per_token=4e-5, draft_step=6e-4, draft_per_token=1e-5
)


def _samples(trees: list[DraftTree]) -> list[StageSample]:
    out = []
    for tree in trees:
        accept = TRUE_ACCEPT.accept_length(tree)
        for c in LEVELS:
            out.append(StageSample(tree, c, accept, c * accept / TRUE_COST.step_s(tree, c)))
    return out


def test_acceptance_is_recovered_from_accept_lengths() -> None:
    fitted = fit_acceptance([(t, TRUE_ACCEPT.accept_length(t)) for t in TREES])
    # within the grid's resolution, and what matters, the accept lengths, within 1 %
    assert fitted.p0 == pytest.approx(TRUE_ACCEPT.p0, abs=0.03)
    assert fitted.decay == pytest.approx(TRUE_ACCEPT.decay, abs=0.03)
    assert fitted.gain == pytest.approx(TRUE_ACCEPT.gain, abs=0.1)
    for tree in UNSEEN:
        assert fitted.accept_length(tree) == pytest.approx(TRUE_ACCEPT.accept_length(tree), rel=0.01)


def test_a_chain_only_accepts_the_bonus_token_when_the_draft_accepts_nothing() -> None:
    fitted = fit_acceptance([(t, 1.0) for t in TREES if t.topk == 1])
    assert fitted.accept_length(DraftTree(4, 1, 5)) == pytest.approx(1.0, abs=0.05)


def test_step_cost_is_recovered_from_stage_rates() -> None:
    samples = _samples(TREES)
    cost = fit_step_cost([(s.tree, s.concurrency, s.step_s) for s in samples])
    assert cost.verify_per_token == pytest.approx(TRUE_COST.verify_per_token, rel=0.01)
    assert cost.draft_step == pytest.approx(TRUE_COST.draft_step, rel=0.01)
    assert cost.draft_per_token == pytest.approx(TRUE_COST.draft_per_token, rel=0.01)
    for c in LEVELS:
        assert cost.intercept[c] == pytest.approx(TRUE_COST.intercept[c], rel=0.01)


def test_untried_trees_are_predicted_from_the_measured_ones() -> None:
    model = fit(_samples(TREES))
    for tree in UNSEEN:
        truth = max(c * TRUE_ACCEPT.accept_length(tree) / TRUE_COST.step_s(tree, c) for c in LEVELS)
        assert model.objective(tree) == pytest.approx(truth, rel=0.02)


def test_the_model_measures_its_own_error_once_it_can_leave_a_tree_out() -> None:
    samples = _samples(TREES)
    measured = {t: max(s.tok_s for s in samples if s.tree == t) for t in TREES}
    assert loo_error(_samples(TREES[:2]), measured) is None  # too few trees to fit
    # Three trees: each fit leaving one out holds two, underdetermined, so there is no measured error
    # (and no guessed one: the policy covers another tree instead of trusting the fit).
    assert loo_error(_samples(TREES[:3]), measured) is None
    assert loo_error(_samples(TREES[:4]), measured) is not None
    error = loo_error(samples, measured)
    assert error is not None and error < 0.03
