"""Directions the speed and acceptance model must keep (seeds, SGLang docs, common sense)."""

from __future__ import annotations

import random

import pytest
from simhelp import KIMI, TINY, plan, resolve, spec

from orchestrator.config.draft_tree import DraftTree
from orchestrator.sim.profile import load_profile
from orchestrator.sim.speed import (
    SpeedModel,
    broken_draft_reason,
    expected_accept_length,
    position_probs,
    sample_accepted,
)

KIMI_TP = ["--tp-size", "8"]


def rate(profile: str | dict[str, object], batch: int, *flags: str) -> float:
    args, p = plan(profile, *flags)
    prof = load_profile(profile)
    model = SpeedModel.for_args(prof, args, p.capture_sizes)
    probs = (
        position_probs(prof, model.tree, broken=bool(broken_draft_reason(prof, args))) if model.tree else None
    )
    return model.expected_tokens_per_s(batch, probs)


def test_kimi_baseline_gains_from_a_smaller_graph_batch_as_in_the_seed() -> None:
    assert rate(KIMI, 1, *KIMI_TP, "--cuda-graph-max-bs", "512") == pytest.approx(82.0, rel=0.01)
    assert rate(KIMI, 1, *KIMI_TP, "--cuda-graph-max-bs", "128") == pytest.approx(89.5, rel=0.01)


def test_good_draft_speeds_up_a_single_stream_1_5_to_2_times() -> None:
    base = rate(KIMI, 1, *KIMI_TP, "--cuda-graph-max-bs", "128")
    fast = rate(KIMI, 1, *KIMI_TP, *spec(3, 1, 4), "--cuda-graph-max-bs", "128")
    assert 1.5 <= fast / base <= 2.0


def test_llama8b_matches_the_published_eagle3_figures() -> None:
    assert rate("h200-llama8b", 1) == pytest.approx(158, rel=0.05)
    assert rate("h200-llama8b", 1, *spec(5, 8, 32)) == pytest.approx(373, rel=0.05)


def test_broken_draft_accepts_nothing_and_is_slower_than_no_speculation() -> None:
    broken = {"base": KIMI, "accept_p0": 0.0}
    base = rate(broken, 1, *KIMI_TP, "--cuda-graph-max-bs", "128")
    slow = rate(broken, 1, *KIMI_TP, *spec(3, 1, 4), "--cuda-graph-max-bs", "128")
    assert slow < base
    prof = load_profile(broken)
    assert expected_accept_length(position_probs(prof, DraftTree(3, 1, 4))) == 1.0


@pytest.mark.parametrize(
    "flags",
    [
        ["--speculative-algorithm", "EAGLE", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
         "--speculative-num-draft-tokens", "4"],
        [*spec(3, 1, 4), "--load-format", "dummy"],
    ],
)  # fmt: skip
def test_silent_acceptance_killers_are_modelled(flags: list[str]) -> None:
    args, prof = resolve(KIMI, *KIMI_TP, *flags)
    assert broken_draft_reason(prof, args)
    assert rate(KIMI, 1, *KIMI_TP, *flags) < rate(KIMI, 1, *KIMI_TP, "--cuda-graph-max-bs", "48")


def test_big_draft_trees_stop_paying_at_high_batch() -> None:
    small, big = spec(3, 1, 4), spec(5, 8, 32)
    assert rate("h200-llama8b", 1, *big) > rate("h200-llama8b", 1, *small)
    assert rate("h200-llama8b", 48, *big) < rate("h200-llama8b", 48, *small)
    assert rate("h200-llama8b", 48, *big) < rate("h200-llama8b", 48)  # worse than no speculation at all


def test_batches_above_the_captured_sizes_run_eagerly_and_slower() -> None:
    prof = load_profile(TINY)
    model = SpeedModel(prof, 1, None, (1, 2, 4, 8, 16))
    assert model.uses_graph(16) and not model.uses_graph(17)
    assert model.graph_bs(9) == 16  # padded to the next captured size
    assert model.step_time(17) > model.step_time(16) * 1.3
    assert SpeedModel(prof, 1, None, ()).step_time(4) > model.step_time(4)


def test_acceptance_chain() -> None:
    prof = load_profile(KIMI)
    chain = position_probs(prof, DraftTree(3, 1, 4))
    assert chain[0] == pytest.approx(0.745) and chain[0] > chain[1] > chain[2]
    assert expected_accept_length(chain) == pytest.approx(
        1 + 0.745 + 0.745 * chain[1] + 0.745 * chain[1] * chain[2]
    )
    assert position_probs(prof, DraftTree(3, 4, 8))[0] > chain[0]  # top-k > 1 helps a little
    assert len(position_probs(prof, DraftTree(5, 4, 3))) == 2  # at most draft tokens - 1 accepted
    rng = random.Random(7)
    draws = [sample_accepted(rng, chain) for _ in range(20000)]
    assert 1 + sum(draws) / len(draws) == pytest.approx(expected_accept_length(chain), rel=0.02)
    assert [sample_accepted(random.Random(1), chain) for _ in range(5)] == [
        sample_accepted(random.Random(1), chain) for _ in range(5)
    ]


def test_tp_all_reduce_costs_time() -> None:
    prof = load_profile(KIMI)
    assert SpeedModel(prof, 8, None, (1,)).step_time(1) > SpeedModel(prof, 1, None, (1,)).step_time(1)
