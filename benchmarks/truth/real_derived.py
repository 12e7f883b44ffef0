"""Cases whose truth comes from outside the search: H200 step costs and published accept lengths.

Every other case draws acceptance from the decaying chain the proposal policy fits. Here a case is the
measured H200 profile (`h200-llama8b-measured`: the Llama-3-8B shape's decode steps per tree and batch,
`benchmarks.truth.measured_steps`) with the accept lengths one public source printed for its trees
(`tests/fixtures/acceptance/published.yaml`): real step costs, real acceptance, and nothing of the
policy's model in between. A case's space holds only trees that were both measured and published (the
space is a product of steps, top-k and draft tokens, so each case names values whose every combination
is a published tree), plus memory flags the H200 records cover; the server without speculation is
scored too (`search.optimum`), so a case where it wins is one the search must answer "don't speculate".
The step costs stand for the 8B shape on an H200, the acceptance for the source's own model: each case is
"that draft's acceptance on this GPU's step costs", not a replay of the source's machine.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

from benchmarks.harness.paths import ROOT
from benchmarks.truth.cases import BenchCase
from benchmarks.truth.measured_steps import MEASURED_PROFILE, measured_cells
from orchestrator.config.draft_tree import DraftTree
from orchestrator.driver.search.space import space_configs
from orchestrator.sim.truth import tree_key
from orchestrator.spec.search import Choices, SearchSpace
from orchestrator.spec.sweep_spec import WorkloadSpec

PUBLISHED = ROOT / "tests" / "fixtures" / "acceptance" / "published.yaml"

# The workload the H200 measured (trials/h200-8b-trees.yaml): its two concurrency levels are the only
# batches the step costs hold, so the cases run at those.
WORKLOAD = WorkloadSpec(
    num_prompts=96, input_len=256, output_len=128, concurrency=[8, 32], seed=0, warmup_prompts=4
)


@dataclass(frozen=True)
class RealCase:
    """One published table on the H200's steps: the source and the tree values its space takes."""

    source: str  # a source id of published.yaml
    steps: tuple[int, ...]
    topk: tuple[int, ...]
    draft_tokens: tuple[int, ...]
    why: str


# Each source with accept lengths for at least one tree the H200 measured. The chains' tables also hold
# 4 and 6 steps, which the H200's device time did not reach: those rows are left out, never interpolated.
REAL_CASES = (
    RealCase(
        "specforge-339-qwen3-30b-a3b-2xh100", (3,), (1, 3), (4, 8), "Qwen3-30B-A3B: 3/1/4, 3/3/4, 3/3/8"
    ),
    RealCase("angelslim-163-qwen3-30b-a3b-4xh100", (3,), (3,), (4,), "Qwen3-30B-A3B: 3/3/4 only"),
    RealCase("vllm-20780-llama31-8b-eagle3-chain", (2, 3, 5, 7), (1,), (3,), "Llama-3.1-8B EAGLE-3 chains"),
    RealCase("vllm-20780-llama31-8b-eagle1-chain", (2, 3, 5, 7), (1,), (3,), "Llama-3.1-8B EAGLE-1 chains"),
    RealCase("redhat-llama4-maverick-chain-humaneval", (1, 2, 3, 5, 7), (1,), (2,), "Maverick, HumanEval"),
    RealCase("redhat-llama4-maverick-chain-gsm8k", (1, 2, 3, 5, 7), (1,), (2,), "Maverick, gsm8k"),
    RealCase("redhat-llama4-maverick-chain-cnndm", (1, 2, 3, 5, 7), (1,), (2,), "Maverick, CNN/DM"),
    RealCase("dogacel-specdrift-gpt-oss-120b-chain", (3,), (1,), (4,), "gpt-oss-120b: 3/1/4"),
    RealCase(
        "seanmamasde-llama4-maverick-bench-speculative", (3,), (8,), (10,), "Maverick 3/8/10 at accept 1.04"
    ),
)

# Memory flags the H200 records cover: graphs up to 32 or 64 (both capture every batch the stages run)
# and 16 or 32 running requests (16 halves the batch at concurrency 32: the step is read between the
# measured batches 8 and 32).
MEMORY = {
    "mem_fraction_static": Choices(choices=[0.6, 0.85, 0.95]),
    "cuda_graph_max_bs": Choices(choices=[32, 64]),
    "max_running_requests": Choices(choices=[16, 32]),
}


def published_sources() -> dict[str, dict[str, Any]]:
    data = yaml.safe_load(PUBLISHED.read_text())
    return {s["id"]: s for s in data["sources"]}


def accept_table(source: dict[str, Any]) -> list[dict[str, Any]]:
    """The source's accept lengths as the profile's table: only rows that printed one."""
    rows = []
    for r in source["rows"]:
        if r.get("accept_length") is None:
            continue
        row: dict[str, Any] = {
            "tree": tree_key(DraftTree(r["steps"], r["topk"], r["draft_tokens"])),
            "accept_length": float(r["accept_length"]),
        }
        if r.get("batch") is not None:
            row["batch"] = int(r["batch"])
        rows.append(row)
    return rows


def bench_case(case: RealCase) -> BenchCase:
    source = published_sources()[case.source]
    space = SearchSpace(
        **MEMORY,
        speculative_num_steps=Choices(choices=list(case.steps)),
        speculative_eagle_topk=Choices(choices=list(case.topk)),
        speculative_num_draft_tokens=Choices(choices=list(case.draft_tokens)),
    )
    table = accept_table(source)
    measured = {tree_key(c.tree) for c in measured_cells()}
    published = {r["tree"] for r in table}
    trees = {tree_key(DraftTree.of(c)) for c in space_configs(space)}
    missing = trees - (measured & published)
    if missing:
        raise ValueError(f"{case.source}: the space holds trees not both measured and published: {missing}")
    profile = {
        "base": MEASURED_PROFILE,
        "name": f"real-{case.source}",
        "description": f"H200 8B-shape steps, acceptance of {source['model']} ({source['dataset']})",
        "accept_table": [r for r in table if r["tree"] in trees],
    }
    return BenchCase(
        f"real-{case.source}",
        space,
        why=f"{case.why}; {source['url']}",
        profile=profile,
        workload=WORKLOAD,
    )


def real_derived_cases() -> list[BenchCase]:
    return [bench_case(c) for c in REAL_CASES]
