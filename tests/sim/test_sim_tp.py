"""The simulated node at tp > 1: weights and KV per GPU as the real tp=2 run printed them."""

from __future__ import annotations

import pytest
from simhelp import TINY, plan, spec

from orchestrator.sim.memory import StepKind

RUN = [*spec(3, 1, 4), "--cuda-graph-max-bs", "16", "--max-running-requests", "16"]


def _weights(p):  # type: ignore[no-untyped-def]
    return [s.usage for s in p.steps if s.kind is StepKind.WEIGHTS]


@pytest.mark.parametrize(("tp", "kv_tokens"), [(1, 12_379_562), (2, 24_618_345)])
def test_tiny_profile_matches_the_real_kv_pool_per_gpu(tp: int, kv_tokens: int) -> None:
    _, p = plan(TINY, *RUN, "--mem-fraction-static", "0.85", "--tp-size", str(tp))
    assert p.failure is None
    assert p.kv_tokens == pytest.approx(kv_tokens, rel=0.05)


def test_tiny_profile_splits_target_and_draft_weights_by_tp() -> None:
    _, one = plan(TINY, *RUN, "--mem-fraction-static", "0.85")
    _, two = plan(TINY, *RUN, "--mem-fraction-static", "0.85", "--tp-size", "2")
    assert _weights(two) == pytest.approx([w / 2 for w in _weights(one)], abs=0.01)


def test_tp_beyond_the_kv_heads_replicates_the_kv_cache() -> None:
    _, eight = plan(TINY, *RUN, "--mem-fraction-static", "0.85", "--tp-size", "8")
    _, sixteen = plan(TINY, *RUN, "--mem-fraction-static", "0.85", "--tp-size", "16")
    assert eight.failure is None and sixteen.failure is None
    # 8 KV heads: tp 16 keeps one head per GPU, the same bytes per token as tp 8.
    assert sixteen.kv_tokens == pytest.approx(eight.kv_tokens, rel=0.01)
    _, one = plan(TINY, *RUN, "--mem-fraction-static", "0.85")
    assert eight.kv_tokens == pytest.approx(8 * one.kv_tokens, rel=0.02)


def test_a_fraction_too_small_at_tp1_starts_at_tp2() -> None:
    _, one = plan(TINY, *RUN, "--mem-fraction-static", "0.001")
    _, two = plan(TINY, *RUN, "--mem-fraction-static", "0.001", "--tp-size", "2")
    assert one.failure is not None and two.failure is None
