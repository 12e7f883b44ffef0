"""Discretised search spaces and workloads per simulated profile, small enough to grid exhaustively.

Each case is the demo spec (`trials/demo.yaml`) with the profile, the node's GPU count, the workload and
a coarser copy of the demo's search space swapped in, so every strategy searches what specsweep would be
given. Only discrete dimensions are allowed (a float range needs a step): the exhaustive grid has to be
enumerable. The grid is enumerated *through* `suggest_config`, so it holds exactly the configurations the
study can propose (SGLang's draft-token rules included), no more and no fewer.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.harness.paths import DEMO_SPEC
from orchestrator.sim.profile import SimProfile, load_profile
from orchestrator.spec.search import Choices, FloatRange, IntRange, SearchSpace
from orchestrator.spec.sweep_spec import SimulatedSpec, SweepSpec, WorkloadSpec, load_spec

# The demo's concurrency levels with longer outputs and more prompts, so that a large draft tree turns
# compute-bound at the higher level and the request pool and the KV pool matter (the oracle evaluates it
# analytically, so its length costs nothing; it sets the benchmark time a real launch would spend).
WORKLOAD = WorkloadSpec(
    num_prompts=64, input_len=256, output_len=128, concurrency=[1, 4], seed=0, warmup_prompts=2
)

# Speculative values shared by every case: steps 1-4, top-k 1/2/4, draft tokens 2-8 in steps of 2 (the
# study's rules clip them into [steps + 1, top-k * steps + 1]).
_SPEC_DIMS: dict[str, Any] = {
    "speculative_num_steps": IntRange(low=1, high=4),
    "speculative_eagle_topk": Choices(choices=[1, 2, 4]),
    "speculative_num_draft_tokens": IntRange(low=2, high=8, step=2),
}


@dataclass(frozen=True)
class BenchCase:
    """One profile with its discretised space: the unit of the search-efficiency benchmark."""

    name: str  # the simulated profile's built-in name, or a generated case's name
    space: SearchSpace
    why: str = ""
    profile: dict[str, Any] | None = None  # a generated profile (held-out cases); None: the built-in one
    heldout: bool = False
    workload: WorkloadSpec | None = None  # None: the shared WORKLOAD

    def load_profile(self) -> SimProfile:
        return load_profile(self.profile if self.profile is not None else self.name)


CASES: dict[str, BenchCase] = {
    "kimi-k25-rtxpro6000": BenchCase(
        "kimi-k25-rtxpro6000",
        SearchSpace(
            # 0.76 is SGLang's auto fraction here and 0.88 the users' known-good: both on the grid.
            mem_fraction_static=FloatRange(low=0.70, high=0.94, step=0.03),
            cuda_graph_max_bs=Choices(choices=[64, 128, 256, 512]),
            max_running_requests=Choices(choices=[16, 32, 48]),
            **_SPEC_DIMS,
        ),
        why="the demo: 8 GPUs over PCIe, <=0.5.9 memory rules, no known-good head start",
    ),
    "h200-llama8b": BenchCase(
        "h200-llama8b",
        SearchSpace(
            mem_fraction_static=FloatRange(low=0.60, high=0.95, step=0.05),
            cuda_graph_max_bs=Choices(choices=[32, 64, 128, 256]),
            max_running_requests=Choices(choices=[16, 32, 48]),
            **_SPEC_DIMS,
        ),
        why="one H200, roomy: almost everything fits, speed decides",
    ),
    "tight": BenchCase(
        "tight",
        SearchSpace(
            mem_fraction_static=FloatRange(low=0.72, high=0.96, step=0.03),
            cuda_graph_max_bs=Choices(choices=[8, 16, 32, 64]),
            max_running_requests=Choices(choices=[8, 16, 32]),
            **_SPEC_DIMS,
        ),
        why="one 20 GB card: KV OOM below ~0.83, KV pressure just above, graph OOM at the top",
    ),
}


def case_spec(case: BenchCase, *, seed: int = 0, gpus: int, base: Path = DEMO_SPEC) -> SweepSpec:
    """The demo spec turned into this case's spec (profile, GPUs, space, workload, known-good, seed)."""
    spec = load_spec(base)
    return spec.model_copy(
        update={
            "name": f"bench-{case.name}",
            "simulated": SimulatedSpec(profile=case.profile or case.name, seed=0),
            "node": spec.node.model_copy(update={"gpus": gpus}),
            "search": case.space,
            "workload": case.workload or WORKLOAD,
            # Every strategy starts from nothing: no known-good configuration for anyone.
            "known_good": [],
            "budget": spec.budget.model_copy(update={"baseline": False}),
            "sampler_seed": seed,
        }
    )
