"""CUDA-graph and set-up memory per GPU: the constants fitted on SGLang's own logs, and the costs a model's
shape implies.

Fitted on the real logs under tests/fixtures/sglang (SGLang 0.5.17, H200, the tiny Llama): the attention
and cuBLAS set-up before the first capture, each decode-graph runner's ``init_cuda_graph_state`` buffers per
unit of its largest batch, the graph pool per token of the largest captured shape, each captured size's
fixed cost, and the prefill graphs (captured only with 4 GiB free after the set-up). The driver's memory
prior (`driver.memory.prior`) and the simulated server's profile (`sim.profile.SimProfile`, its defaults)
both start from these, so the two sides cannot drift apart; here, below both, neither imports the other.
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.footprint.shape import GIB, ModelShape

PREFILL_GATE_GIB = 4.0  # SGLang skips prefill graphs with less than this free after the set-up


@dataclass(frozen=True)
class GraphCosts:
    """CUDA-graph and set-up memory per GPU (GiB)."""

    eager_setup_gib: float = 0.617
    eager_setup_gib_per_bs: float = 0.0002
    state_gib_per_bs: float = 0.0000625
    target_gib_per_token: float = 0.0003
    draft_gib_per_token: float = 0.0003
    gib_per_graph: float = 0.0035
    target_prefill_gib: float = 0.31
    draft_prefill_gib: float = 0.26
    prefill_min_free_gib: float = PREFILL_GATE_GIB
    prefill_graphs: bool = True  # False: launched with --cuda-graph-backend-prefill disabled


def graph_costs_for(target: ModelShape, draft: ModelShape | None, tp: int) -> GraphCosts:
    """Graph costs from the shapes: a token of a captured shape holds its logits (6 bytes per entry of
    the vocabulary it scores) and its activations (hidden and the tp share of the MLP)."""

    def per_token(vocab: int, shape: ModelShape) -> float:
        return (6 * vocab + 16 * shape.hidden + 4 * shape.intermediate / tp) / GIB

    width = target.hidden / 512  # prefill graphs measured at hidden 512 (the only real figure)
    d = draft or target
    return GraphCosts(
        eager_setup_gib=0.617 if tp == 1 else 1.18,
        target_gib_per_token=per_token(target.vocab, target),
        draft_gib_per_token=per_token(d.draft_vocab or d.vocab, d),
        target_prefill_gib=0.31 * width,
        draft_prefill_gib=0.26 * width,
    )
