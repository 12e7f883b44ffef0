"""Structure first: memory flags that cannot throttle the workload, at the highest fraction that fits."""

from __future__ import annotations

import pytest

from benchmarks.truth.cases import CASES, case_spec
from benchmarks.truth.oracle import Oracle
from orchestrator.config.draft_tree import DraftTree
from orchestrator.driver.loop.node_memory import memory_model_for
from orchestrator.driver.proposal.structure import choose_structure, config_for, covering, fitting_config
from orchestrator.driver.proposal.trees import trees_of
from orchestrator.records import TrialStatus
from orchestrator.sim.profile import load_profile
from orchestrator.spec.search import Choices, FloatRange, IntRange, SearchSpace


def _space(graphs: list[float], running: list[float]) -> SearchSpace:
    return SearchSpace(
        mem_fraction_static=FloatRange(low=0.7, high=0.9, step=0.05),
        cuda_graph_max_bs=Choices(choices=graphs),
        max_running_requests=Choices(choices=running),
        speculative_num_steps=IntRange(low=1, high=3),
        speculative_eagle_topk=Choices(choices=[1, 2]),
        speculative_num_draft_tokens=IntRange(low=2, high=6, step=2),
    )


def test_the_graphs_and_the_request_pool_cover_the_highest_concurrency_and_no_more() -> None:
    s = choose_structure(_space([256, 16, 32, 64], [48, 16, 32]), [1, 4, 24])
    assert (s.cuda_graph_max_bs, s.max_running_requests) == (32, 32)
    assert s.fractions == pytest.approx((0.7, 0.75, 0.8, 0.85, 0.9))


def test_a_concurrency_above_every_searched_value_takes_the_largest() -> None:
    s = choose_structure(_space([8, 16], [4, 8]), [64])
    assert (s.cuda_graph_max_bs, s.max_running_requests) == (16, 8)
    assert covering([1.0, 4.0], 4) == 4


def test_the_trees_are_what_the_study_can_propose() -> None:
    trees = trees_of(_space([16], [16]))
    assert DraftTree(1, 1, 2) in trees and DraftTree(3, 1, 4) in trees  # top-k 1: draft tokens are steps + 1
    assert (
        DraftTree(2, 2, 5) in trees and DraftTree(3, 2, 6) in trees
    )  # top-k 2: within [steps + 1, 2 steps + 1]
    assert all(t.steps + 1 <= t.draft_tokens <= t.topk * t.steps + 1 for t in trees)
    assert DraftTree(1, 2, 4) not in trees  # clipped to 3 by SGLang's rule, which the study applies


def test_every_tree_on_the_tight_card_starts_at_the_fraction_the_prior_chooses() -> None:
    """On a 20 GB card where the KV pool fails below ~0.83 and the graphs at the top, each tree is launched
    at the highest fraction the prior says fits by its margin, and the simulated node starts and serves
    every one of them."""
    case = CASES["tight"]
    profile = load_profile(case.name)
    spec = case_spec(case, gpus=profile.gpu_count)
    oracle = Oracle(spec, profile)
    model, _ = memory_model_for(spec, None)
    structure = choose_structure(spec.search, spec.workload.concurrency)
    fractions = sorted(structure.fractions)
    for tree in trees_of(spec.search):
        config = fitting_config(structure, tree, model)
        assert config is not None
        assert oracle.evaluate(config).status is TrialStatus.OK, config.label()
        above = [f for f in fractions if f > config.mem_fraction_static]
        if above:  # the next fraction up is not one the prior is sure of
            prediction = model.predict(config_for(structure, tree, above[0]))
            assert not (prediction.confident and prediction.fits)
