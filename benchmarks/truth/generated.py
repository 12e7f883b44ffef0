"""Profiles generated from a seed, for scoring the search on problems it was not tuned on.

Each generated case is a plausible single-node SGLang + EAGLE-3 set-up: a GPU size, a model size (its
weights take 35-75 % of the GPU, its KV bytes per token grow with it), a draft of its own size and cost,
an acceptance curve, start-up times that grow with the weights, either version's memory rules, and a
discretised space whose memory-fraction range is placed so that the feasible share of the grid lands
near a target between 20 % and 90 %. A candidate whose share misses its target by more than 10 points is
drawn again. The cases depend only on the seed: the development set and the held-out set are two seeds.
"""

from __future__ import annotations

import random
from typing import Any

from benchmarks.truth.cases import _SPEC_DIMS, BenchCase, case_spec
from benchmarks.truth.oracle import Oracle
from orchestrator.driver.search.space import space_configs
from orchestrator.sim.profile import load_profile
from orchestrator.spec.search import Choices, FloatRange, SearchSpace

GPU_MIB = (24564, 46068, 81559, 97887, 143771)  # 24 GB, 48 GB, 80 GB, 96 GB, 141 GB cards
GRAPH_CHOICES = ((16, 32, 64, 128), (32, 64, 128, 256), (64, 128, 256, 512))
RUNNING_CHOICES = ((8, 16, 32), (16, 32, 48), (32, 48, 64))
SHARE_TARGETS = (0.25, 0.45, 0.65, 0.85)
TRIES = 40


def _profile(rng: random.Random, name: str) -> dict[str, Any]:
    gpu_mib = rng.choice(GPU_MIB)
    gpu_gib = gpu_mib / 1024
    weights = round(gpu_gib * rng.uniform(0.35, 0.75), 2)
    size = weights / 14.96  # relative to Llama-3.1-8B in bf16
    step = 0.002 + 0.00028 * weights * rng.uniform(0.7, 1.4)
    return {
        "base": "h200-llama8b",
        "name": name,
        "description": f"generated: {weights:.0f} GiB model on a {gpu_gib:.0f} GiB GPU",
        "version_behaviour": rng.choice(["<=0.5.9", ">=0.5.14"]),
        "gpu_total_mib": gpu_mib,
        "target_weights_gib": weights,
        "draft_weights_gib": round(rng.uniform(0.4, 2.5), 2),
        "target_kv_bytes_per_token": int(131072 * size**0.7 * rng.uniform(0.6, 1.4)),
        "draft_kv_bytes_per_token": int(4096 * rng.uniform(1.0, 8.0)),
        "context_len": 8192,
        "import_s": rng.uniform(30.0, 80.0),
        "weight_load_s": weights * rng.uniform(0.3, 1.5),
        "graph_capture_s_per_bs": rng.uniform(0.1, 0.5),
        "prefill_graph_capture_s": rng.uniform(5.0, 20.0),
        "server_start_s": rng.uniform(4.0, 10.0),
        "target_step_base_s": step,
        "target_step_per_token_s": rng.uniform(0.00002, 0.0001),
        "draft_step_base_s": step * rng.uniform(0.05, 0.25),
        "draft_step_per_token_s": rng.uniform(0.000005, 0.00005),
        "accept_p0": rng.uniform(0.55, 0.88),
        "accept_decay": rng.uniform(0.75, 0.95),
        "topk_gain": rng.uniform(0.05, 0.4),
    }


def _space(rng: random.Random) -> SearchSpace:
    low = round(rng.uniform(0.50, 0.73), 2)
    return SearchSpace(
        mem_fraction_static=FloatRange(low=low, high=round(low + 0.24, 2), step=0.03),
        cuda_graph_max_bs=Choices(choices=list(rng.choice(GRAPH_CHOICES))),
        max_running_requests=Choices(choices=list(rng.choice(RUNNING_CHOICES))),
        **_SPEC_DIMS,
    )


def feasible_share(case: BenchCase, sample: int = 300) -> float:
    """The share of (a fixed sample of) the grid that starts and serves without running out of memory."""
    profile = case.load_profile()
    oracle = Oracle(case_spec(case, gpus=profile.gpu_count), profile)
    configs = space_configs(case.space)
    picked = random.Random(0).sample(configs, min(sample, len(configs)))
    return sum(oracle.evaluate(c).objective is not None for c in picked) / len(picked)


def generate(seed: int, count: int, *, heldout: bool) -> list[BenchCase]:
    """`count` cases from `seed`, their feasible-share targets spread over 20-90 %."""
    rng = random.Random(seed)
    cases: list[BenchCase] = []
    for i in range(count):
        target = SHARE_TARGETS[i % len(SHARE_TARGETS)]
        name = f"gen{seed}-{i}"
        best: tuple[float, BenchCase] | None = None
        for _ in range(TRIES):
            profile = _profile(rng, name)
            load_profile(profile)  # fails loudly on a field the profile does not know
            case = BenchCase(name, _space(rng), profile=profile, heldout=heldout)
            share = feasible_share(case)
            if best is None or abs(share - target) < abs(best[0] - target):
                best = (share, case)
            if abs(share - target) <= 0.10:
                break
        assert best is not None
        share, case = best
        desc = str(case.profile["description"]) if case.profile else ""
        cases.append(
            BenchCase(
                name,
                case.space,
                why=f"{desc}, {case.profile['version_behaviour'] if case.profile else ''} rules, "
                f"feasible share about {share:.0%}",
                profile=case.profile,
                heldout=heldout,
            )
        )
    return cases
