"""The draft's training prompts and its held-out workload: distinct, deterministic, disjoint."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.pair.prompts import load_mt_bench, overlap, training_prompts

MT_BENCH = Path(__file__).resolve().parents[2] / "trials" / "datasets" / "mt_bench_questions.jsonl"


def test_training_prompts_are_distinct_and_the_same_for_the_same_seed() -> None:
    prompts = training_prompts(4000, seed=0)
    assert len(prompts) == len(set(prompts)) == 4000
    assert training_prompts(4000, seed=0) == prompts
    assert training_prompts(4000, seed=1) != prompts


def test_asking_for_more_prompts_than_exist_names_the_field() -> None:
    with pytest.raises(ValueError, match="count: at most"):
        training_prompts(10**6, seed=0)


def test_held_out_set_is_mt_bench_and_shares_no_prompt_with_training() -> None:
    held = load_mt_bench(MT_BENCH)
    assert len(held) == 80
    assert held[0].startswith("Compose an engaging travel blog post about a recent trip to Hawaii")
    every_training_prompt = training_prompts(4294, seed=0)
    assert overlap(every_training_prompt, held, threshold=0.5) == []


def test_overlap_finds_a_copied_and_a_reworded_prompt() -> None:
    held = ["Explain photosynthesis to a high school student.", "Write a poem about the sea."]
    train = ["Explain photosynthesis to a high school student!", "Describe volcanoes in simple words."]
    assert overlap(train, held) == [(train[0], held[0])]
