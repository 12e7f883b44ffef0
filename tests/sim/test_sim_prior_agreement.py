"""The simulator's start-up walk (`sim.memory.plan_startup`) and the memory prior
(`driver.memory.prior.estimate`) agree on every profile: the same verdict (fits or where it fails) and the
same KV pool. The profiles that name their models' config.json (`footprint.shape`) take weights and KV bytes
from the prior's arithmetic, so a change to either side that is not made to the other fails here."""

from __future__ import annotations

import itertools

import pytest
from simhelp import plan, spec

from orchestrator.driver.memory.node_facts import facts_from_profile
from orchestrator.driver.memory.prior import estimate
from orchestrator.footprint.shape import load_shape
from orchestrator.records import ServerConfig
from orchestrator.sim.profile import load_profile
from orchestrator.sim.shape_memory import REPO_ROOT

CASES = [
    ("h200-tiny", 1, [0.0005, 0.001, 0.002, 0.3, 0.85, 0.97, 0.985, 0.99, 0.995]),
    ("h200-tiny", 2, [0.0005, 0.001, 0.85, 0.99]),
    ("h200-llama8b", 1, [0.1, 0.12, 0.13, 0.5, 0.85, 0.95, 0.97, 0.98]),
    ("kimi-k25-rtxpro6000", 8, [0.7, 0.72, 0.74, 0.8, 0.85, 0.88, 0.9, 0.92, 0.95]),
]
TREES = [(3, 1, 4), (4, 2, 8), (1, 1, 2), (5, 4, 12)]


@pytest.mark.slow  # seconds of real time (a simulated server, a sweep or a wait); left out of `make unit`
@pytest.mark.parametrize(("name", "tp", "fractions"), CASES, ids=[f"{c[0]}-tp{c[1]}" for c in CASES])
def test_simulator_and_prior_agree(name: str, tp: int, fractions: list[float]) -> None:
    facts = facts_from_profile(load_profile(name), tp)
    for f, bs, mrr, tree in itertools.product(fractions, [16, 64, 256, 512], [16, 64, 256], TREES):
        flags = [*spec(*tree), "--tp-size", str(tp), "--mem-fraction-static", str(f)]
        _, p = plan(name, *flags, "--cuda-graph-max-bs", str(bs), "--max-running-requests", str(mrr))
        est = estimate(facts, ServerConfig(f, bs, mrr, *tree))
        where = f"{name} tp{tp} f{f} bs{bs} mrr{mrr} {tree}"
        assert (p.failure is None) == est.fits, f"{where}: sim {p.failure}, prior {est.reason}"
        if p.failure is not None:
            assert p.failure.stage is est.stage, where
        if p.kv_tokens and f > est.floor_fraction + 0.05:
            assert est.kv_tokens == pytest.approx(p.kv_tokens, rel=0.01), where


@pytest.mark.parametrize("name", ["h200-tiny", "h200-llama8b"])
def test_profiles_naming_a_model_take_its_config_json_figures(name: str) -> None:
    profile = load_profile(name)
    assert profile.model_shape is not None
    target = load_shape(REPO_ROOT / profile.model_shape["target"])
    draft = load_shape(REPO_ROOT / profile.model_shape["draft"])
    assert profile.target_weights_gib == pytest.approx(target.weights_gib(1, first_load=True))
    assert profile.draft_weights_gib == pytest.approx(draft.weights_gib(1, first_load=False))
    assert profile.target_kv_bytes_per_token == target.kv_bytes_per_token(1)
    assert profile.draft_kv_bytes_per_token == draft.kv_bytes_per_token(1)


def test_a_profile_based_on_a_named_model_may_state_a_figure_itself() -> None:
    profile = load_profile({"base": "h200-llama8b", "name": "what-if", "draft_weights_gib": 5.0})
    assert profile.draft_weights_gib == 5.0
    assert profile.target_weights_gib == pytest.approx(load_profile("h200-llama8b").target_weights_gib)
