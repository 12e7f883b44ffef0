"""The acceptance model against accept lengths other people measured (tests/fixtures/acceptance): every
published table with at least three trees is fitted within 2 % mean absolute relative error, and the
model's leave-one-out error on each is the figure measured when the form was chosen.

On the two SGLang tables of trees (top-k > 1) the per-position form, which cannot see the draft-token
budget, misses by about 5 %: it gives (3, 3, 4) and (3, 3, 8) one accept length where SGLang measured
1.99 and 2.20."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from orchestrator.config.draft_tree import DraftTree
from orchestrator.driver.speculation.spec_model import (
    Acceptance,
    AcceptanceForm,
    acceptance_loo,
    choose_form,
    fit_acceptance,
)

PUBLISHED = Path(__file__).resolve().parents[2] / "fixtures" / "acceptance" / "published.yaml"

# source id -> (in-sample mean |error|, leave-one-out mean |error|, leave-one-out max |error|), as measured
MEASURED = {
    "specforge-339-qwen3-30b-a3b-2xh100": (0.0184, 0.0508, 0.120),
    "angelslim-163-qwen3-30b-a3b-4xh100": (0.0100, 0.0289, 0.045),
    "vllm-20780-llama31-8b-eagle3-chain": (0.0040, 0.0040, 0.009),
    "vllm-20780-llama31-8b-eagle1-chain": (0.0044, 0.0051, 0.008),
    "redhat-llama4-maverick-chain-humaneval": (0.0081, 0.0109, 0.016),
    "redhat-llama4-maverick-chain-gsm8k": (0.0069, 0.0087, 0.020),
    "redhat-llama4-maverick-chain-cnndm": (0.0027, 0.0042, 0.011),
}
TREE_TABLES = ("specforge-339-qwen3-30b-a3b-2xh100", "angelslim-163-qwen3-30b-a3b-4xh100")


def _tables() -> dict[str, list[tuple[DraftTree, float]]]:
    """Each source's mean accept length per tree (a tree measured at several batches: their mean, as the
    policy pools a tree's stages), for the sources with at least three trees."""
    out = {}
    for source in yaml.safe_load(PUBLISHED.read_text())["sources"]:
        by_tree: dict[DraftTree, list[float]] = {}
        for row in source["rows"]:
            if "accept_length" in row:
                tree = DraftTree(row["steps"], row["topk"], row["draft_tokens"])
                by_tree.setdefault(tree, []).append(float(row["accept_length"]))
        if len(by_tree) >= 3:
            out[source["id"]] = [(t, sum(v) / len(v)) for t, v in by_tree.items()]
    return out


TABLES = _tables()


def _in_sample(table: list[tuple[DraftTree, float]], form: AcceptanceForm) -> float:
    fitted = fit_acceptance(table, form)
    return sum(abs(fitted.accept_length(t) / a - 1.0) for t, a in table) / len(table)


def test_every_table_of_three_trees_or_more_is_checked() -> None:
    assert set(TABLES) == set(MEASURED)


@pytest.mark.parametrize("source", sorted(MEASURED))
def test_the_model_fits_each_published_table_within_2_percent(source: str) -> None:
    table = TABLES[source]
    form = choose_form(table)
    assert form is AcceptanceForm.BUDGET  # SGLang's verified nodes are chosen on every table
    in_sample, loo_mean, loo_max = MEASURED[source]
    assert _in_sample(table, form) <= 0.02
    assert _in_sample(table, form) == pytest.approx(in_sample, abs=0.0005)
    loo = [abs(e) for e in acceptance_loo(table, form)]
    assert sum(loo) / len(loo) == pytest.approx(loo_mean, abs=0.0005)
    assert max(loo) == pytest.approx(loo_max, abs=0.001)


@pytest.mark.parametrize("source", TREE_TABLES)
def test_a_form_blind_to_the_budget_misses_the_tree_tables(source: str) -> None:
    table = TABLES[source]
    assert _in_sample(table, AcceptanceForm.PER_POSITION) > 0.04
    same_shape = [t for t, _ in table if (t.steps, t.topk) == (3, 3)]
    if len(same_shape) == 2:  # (3, 3, 4) and (3, 3, 8): one figure per-position, two with the budget
        position = fit_acceptance(table, AcceptanceForm.PER_POSITION)
        budget = fit_acceptance(table, AcceptanceForm.BUDGET)
        assert position.accept_length(same_shape[0]) == position.accept_length(same_shape[1])
        assert budget.accept_length(DraftTree(3, 3, 8)) > budget.accept_length(DraftTree(3, 3, 4)) + 0.2


def _nodes(tree: DraftTree, p0: float, decay: float, gain: float) -> list[float]:
    """Every node SGLang's beam expansion drafts, as its path probability, written out by hand: top-k
    candidates at depth 1, then top-k children of each of the k likeliest nodes of the depth above."""

    def rank(first: float, r: int) -> float:
        def held(n: int) -> float:
            return 0.0 if n == 0 else 1 - (1 - first) * n**-gain

        return held(r) - held(r - 1)

    beam = [rank(p0, r) for r in range(1, tree.topk + 1)]
    every = list(beam)
    for depth in range(1, tree.steps):
        children = [b * rank(p0 * decay**depth, r) for b in beam for r in range(1, tree.topk + 1)]
        every += children
        beam = sorted(children, reverse=True)[: tree.topk]
    return every


@pytest.mark.parametrize("draft_tokens", [4, 8])
def test_the_verify_sees_draft_tokens_minus_one_nodes_of_the_published_trees(draft_tokens: int) -> None:
    """SGLang verifies the root's token plus `draft_tokens - 1` drafted nodes: on the published (3, 3, 4)
    and (3, 3, 8) trees (1.99 and 2.20 measured on one draft) that is 3 and 7 of the 21 nodes drafted, and
    the accept length is 1 + their path probabilities. A budget of `draft_tokens` nodes would count one
    node more on each, and make (3, 3, 4) worth nearly what (3, 3, 5) is."""
    p0, decay, gain = 0.62, 0.9, 0.6
    tree = DraftTree(3, 3, draft_tokens)
    nodes = sorted(_nodes(tree, p0, decay, gain), reverse=True)
    assert len(nodes) == 3 + 9 + 9
    expected = 1 + sum(nodes[: draft_tokens - 1])
    got = Acceptance(p0, decay, gain).accept_length(tree)
    assert got == pytest.approx(expected, rel=1e-9)
    assert got != pytest.approx(1 + sum(nodes[:draft_tokens]), rel=1e-3)


def test_the_wider_budget_of_the_published_pair_is_worth_its_extra_nodes() -> None:
    p0, decay, gain = 0.62, 0.9, 0.6
    small, large = DraftTree(3, 3, 4), DraftTree(3, 3, 8)
    nodes = sorted(_nodes(large, p0, decay, gain), reverse=True)
    model = Acceptance(p0, decay, gain)
    gained = model.accept_length(large) - model.accept_length(small)
    assert gained == pytest.approx(sum(nodes[3:7]), rel=1e-9) and gained > 0.1
