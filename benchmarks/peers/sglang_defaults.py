"""What SGLang sets itself for a launch that sets none of the searched flags, snapped to a case's space:
the starting point both tool tuners (`peers.auto_benchmark`, `peers.vllm_auto_tune`) take from SGLang.
"""

from __future__ import annotations

from benchmarks.truth.oracle import Oracle
from orchestrator.driver.proposal.trees import dim_values
from orchestrator.sim.args import build_parser, resolve

USUAL_TREE = (3, 1, 4)  # SGLang's EAGLE-3 tree when none is given: steps 3, top-k 1, draft tokens 4


def nearest(options: list[float], target: float) -> float:
    return min(options, key=lambda v: (abs(v - target), v))


def sglang_defaults(oracle: Oracle, *, speculative: bool = True) -> tuple[float, int, int]:
    """SGLang's own choices for a launch that sets none of the searched flags, snapped to the space: auto
    `mem_fraction_static`, graph batch by GPU size, and with speculation requests reset to 48 (without it
    SGLang sizes the request pool from the KV pool: the space's largest stands for that)."""
    spec, profile = oracle.spec, oracle.profile
    argv = [
        "--model-path", spec.model.path, "--tp-size", str(oracle.gpus),
        "--sim-profile", profile.name, "--sim-state-dir", "/nonexistent",
    ]  # fmt: skip
    if speculative:
        argv += [
            "--speculative-algorithm", spec.model.speculative_algorithm,
            "--speculative-draft-model-path", spec.model.draft_path,
        ]  # fmt: skip
    args = resolve(build_parser().parse_args(argv), profile, frozenset())
    space = spec.search
    requests = dim_values(space.max_running_requests)
    return (
        nearest(dim_values(space.mem_fraction_static), args.mem_fraction_static),
        int(nearest(dim_values(space.cuda_graph_max_bs), args.cuda_graph_max_bs)),
        int(
            nearest(requests, float(args.max_running_requests)) if args.max_running_requests else requests[-1]
        ),
    )


def sglang_tree(steps: int, topk: int, draft: int) -> tuple[int, int, int]:
    """The tree SGLang runs for these flags: with top-k 1 it sets draft tokens to steps + 1
    (`sglang.srt.server_args`; `orchestrator.sim.args` follows it); any other tree runs as given."""
    if topk == 1:
        return steps, 1, steps + 1
    return steps, topk, draft


def usual_tree(oracle: Oracle) -> tuple[int, int, int]:
    s = oracle.spec.search
    steps = int(nearest(dim_values(s.speculative_num_steps), USUAL_TREE[0]))
    topk = int(nearest(dim_values(s.speculative_eagle_topk), USUAL_TREE[1]))
    draft = int(nearest(dim_values(s.speculative_num_draft_tokens), USUAL_TREE[2]))
    return sglang_tree(steps, topk, draft)
