"""One speculative tree, as the proposal policy and the simulator both read it."""

from __future__ import annotations

from orchestrator.config.draft_tree import DraftTree
from orchestrator.spec.search import make_config


def test_a_configuration_has_its_tree_and_the_baseline_none() -> None:
    assert DraftTree.of(make_config(0.8, 64, 16, 3, 2, 6)) == DraftTree(3, 2, 6)
    assert DraftTree.of(make_config(0.8, 64, 16)) is None
    assert DraftTree(3, 2, 6).label() == "s3k2d6"


def test_one_verify_accepts_at_most_the_chain_depth_within_the_tree() -> None:
    assert DraftTree(3, 1, 4).max_accepted == 3
    assert DraftTree(5, 4, 3).max_accepted == 2  # a tree of 3 tokens holds at most 2 drafts past the root
    assert DraftTree(0, 1, 1).max_accepted == 0
