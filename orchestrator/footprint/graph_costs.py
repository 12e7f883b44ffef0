"""CUDA-graph and set-up memory per GPU: the constants fitted on SGLang's own logs, and the costs a model's
shape implies.

Fitted on the real logs under tests/fixtures/sglang (SGLang 0.5.17, H200, the tiny Llama): the attention
and cuBLAS set-up before the first capture, each decode-graph runner's ``init_cuda_graph_state`` buffers per
unit of its largest batch, the graph pool per token of the largest captured shape, each captured size's
fixed cost, and the prefill graphs (captured only with 4 GiB free after the set-up). The costs of a real
model's shape are fitted on the capture lines of the H200 logs of two shapes (`graph_costs_for`). The
driver's memory prior (`driver.memory.prior`) and the simulated server's profile (`sim.profile.SimProfile`,
its defaults) both start from these, so the two sides cannot drift apart; here, below both, neither imports
the other.
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
    target_gib_per_token: float = 0.0003  # target decode and verify graphs, per token of the largest
    target_gib_per_size_token: float = 0.0  # the target's, per token of every captured size (summed)
    draft_gib_per_token: float = 0.0003  # the draft's extend graphs
    draft_step_gib_per_token: float = 0.0003  # the draft's decode graphs, per token of one step
    gib_per_graph: float = 0.0035  # the target's, per captured size
    draft_gib_per_graph: float = 0.0035  # each draft runner's, per captured size
    target_prefill_gib: float = 0.31
    draft_prefill_gib: float = 0.26
    prefill_min_free_gib: float = PREFILL_GATE_GIB
    # what start-up leaves above the prior grows with the largest captured size (the allocator gives
    # back more the larger the graphs: 0.80 GiB at bs 16 to 1.05 at bs 256 on the 8B shape), so a
    # correction read off a launch with larger graphs must not be carried whole to smaller ones
    credit_gib_per_bs: float = 0.0
    prefill_graphs: bool = True  # False: launched with --cuda-graph-backend-prefill disabled


def graph_costs_for(target: ModelShape, draft: ModelShape | None, tp: int) -> GraphCosts:
    """Graph costs from the shapes, per token of a runner's largest captured shape.

    The forms are fitted on what each runner's capture line printed (``Capture target verify CUDA graph
    end ... mem usage``) in 63 H200 logs of the Llama-3-8B and Qwen3-32B shapes (trees from s1k1d2 to
    s8k8d60, graph bs 16 to 256; `tests/driver/memory/test_graph_runners.py`). The target's graphs hold
    the logits (5 bytes a vocabulary entry) and about 3 bytes per hidden unit of every layer (64 layers of
    the 32B take twice the 8B's 32, which the 8B alone cannot tell from a wider MLP) at the largest size,
    plus 4 bytes per hidden unit of every token of every captured size (each graph keeps its own output;
    without this term bs 256 was 0.3 GiB under, rms 0.074 -> 0.020 GiB), plus 3.3 MiB a graph. The
    draft's single layer grows with its MLP (32 bytes per intermediate unit for the extend graphs and 22
    per step for the decode graphs) and its own vocabulary (3 bytes an entry); its graphs cost 2 MiB
    each (fitted 1.8 extend, 1.1 decode on these shapes; 2-3.5 on the tiny chat model), under the
    target's. Activations of the MLP are split across tensor-parallel ranks; the hidden states and the
    gathered logits are not."""
    d = draft or target
    draft_vocab = d.draft_vocab or d.vocab
    width = target.hidden / 512  # prefill graphs measured at hidden 512 (the only real figure)
    return GraphCosts(
        eager_setup_gib=0.617 if tp == 1 else 1.18,
        target_gib_per_token=(5 * target.vocab + 3 * target.hidden * target.layers) / GIB,
        target_gib_per_size_token=4 * target.hidden / GIB,
        gib_per_graph=0.0033,
        draft_gib_per_graph=0.002,
        credit_gib_per_bs=0.0011,
        draft_gib_per_token=(3 * draft_vocab + 32 * d.intermediate / tp) / GIB,
        draft_step_gib_per_token=22 * d.intermediate / tp / GIB,
        target_prefill_gib=0.31 * width,
        draft_prefill_gib=0.26 * width,
    )
