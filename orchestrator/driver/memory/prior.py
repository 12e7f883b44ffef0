"""The memory prior: what a configuration needs per GPU, predicted before any launch.

Inputs are `MemoryFacts` (`facts`, per GPU, at the sweep's tp): the GPU's memory, both models' weights and KV
bytes per token (from their config.json through `footprint.shape`, or from a simulated profile, which names
the same figures), and the CUDA-graph cost constants. `estimate` walks SGLang's start-up in order and
returns the figures a log would print, the floor and ceiling fractions, and where it would fail.

SGLang's KV sizing: ``python/sglang/srt/model_executor/model_runner_kv_cache_mixin.py``,
``ModelRunnerKVCacheMixin.profile_max_num_token`` (the 0.5.x series; the statement
``rest_memory = available_gpu_memory - total_gpu_memory * (1 - self.mem_fraction_static)`` and
``int(rest_memory * (1 << 30)) // cell_size`` with ``get_cell_size_per_token``: ``get_num_kv_heads(tp) x
(head_dim + v_head_dim) x layers x kv bytes``, MLA ``(kv_lora_rank + qk_rope_head_dim) x layers x kv
bytes``). 0.5.14+ raises right after it, when ``rest_memory <= 0``, the ValueError that prints
``minimum viable = 1 - available/pre`` (seen verbatim in the 0.5.17 fixture logs; later releases moved
it to ``model_runner_components/kv_cache_configurator.py``, ``_profile_available_bytes``). The line
numbers of the 0.5.17 wheel could not be checked offline; the figures below are checked against its
real logs instead (tests/driver/memory/test_memory_prior.py):

    rest   = available_after_both_models - pre_model_load * (1 - f)
    tokens = rest / (target cell + draft cell)          # both pools hold the same number of tokens

Up to 0.5.9 the target sizes its pool before the draft loads (target cell only), so the draft's weights,
its KV and every graph come out of the ``(1 - f)`` slack.

Constants fitted on the real logs under tests/fixtures/sglang (SGLang 0.5.17, H200; tiny Llama at tp 1
and 2, and the 8B shape's start-up figures): the CUDA context (0.62 GiB), what distributed init takes
(0.09 GiB at tp 1, 1.00 at tp > 1: NCCL and custom all-reduce buffers), what is allocated between the
weights and the KV profile (0.10 GiB / tp: it makes the printed minimum viable 0.0018 and 0.1237) and
with the pools (0.08 GiB, 0.19 at tp > 1), the attention/cuBLAS set-up (0.62 GiB, 1.18 at tp > 1), and
the graph costs (`footprint.graph_costs.GraphCosts`, which the simulator's profiles start from too): per
decode-graph runner ``state x max_bs + per_token x max_bs x tokens
per request + per_graph x captured sizes``, with a token's cost the logits (bf16 and their fp32 copy: 6
bytes per vocabulary entry, the 126 MiB allocation of the tiny model's bs 512 OOM; the 8B draft's 250
MiB at bs 256 x 8 tokens x 32000) plus the activations. Prefill graphs are captured only when 4 GiB are
free after the set-up; their size was measured on the tiny model only (0.31 and 0.26 GiB) and is scaled
by the hidden size, the least certain constant here: launches correct it
(`prior_model.PriorMemoryModel`).
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.config.adaptive import candidate_steps, tiers_of
from orchestrator.driver.memory.facts import MemoryFacts, VersionRule
from orchestrator.footprint.graph_costs import GraphCosts
from orchestrator.footprint.sglang_defaults import capture_sizes
from orchestrator.footprint.shape import GIB
from orchestrator.records import FailureStage, ServerConfig, fraction_text

# Each other tier of an adaptive launch: "Built adaptive runtime state steps=0/1/3: mem=0.09/0.11/0.17GB"
# on the tiny model (chat-h200 logs), about 0.05 GiB more than the graphs it captures.
ADAPTIVE_TIER_STATE_GIB = 0.05


@dataclass(frozen=True)
class Estimate:
    """The predicted start-up of one configuration on one GPU (GiB, SGLang's "GB")."""

    weights_gb: float
    draft_weights_gb: float
    kv_tokens: int
    kv_gb: float  # target + draft pools
    graph_gb: float  # set-up, prefill and decode graphs of both models
    room_gb: float  # free after the pools, for the set-up and the graphs
    late_draft_gb: float  # up to 0.5.9: the draft's weights and pool, taken from that room first
    left_gb: float  # free at the end (negative: short by that much)
    floor_fraction: float  # SGLang's "minimum viable": below it the weights leave no KV pool
    ceiling_fraction: float  # above it the graphs no longer fit
    prefill_graphs: bool
    fits: bool
    stage: FailureStage | None
    reason: str

    def as_dict(self) -> dict[str, float | int | bool | str | None]:
        return {
            "weights_gb": round(self.weights_gb, 3),
            "draft_weights_gb": round(self.draft_weights_gb, 3),
            "kv_tokens": self.kv_tokens,
            "kv_gb": round(self.kv_gb, 3),
            "graph_gb": round(self.graph_gb, 3),
            "room_gb": round(self.room_gb, 3),
            "late_draft_gb": round(self.late_draft_gb, 3),
            "left_gb": round(self.left_gb, 3),
            "floor_fraction": round(self.floor_fraction, 4),
            "ceiling_fraction": round(self.ceiling_fraction, 4),
            "prefill_graphs": self.prefill_graphs,
            "fits": self.fits,
            "stage": self.stage.value if self.stage else None,
            "reason": self.reason,
        }


def _runner(
    g: GraphCosts,
    sizes: list[int],
    tokens_per_req: int,
    per_token: float,
    per_graph: float,
    per_size_token: float = 0.0,
) -> float:
    max_bs = max(sizes)
    largest = per_token * max_bs * tokens_per_req
    every = per_size_token * sum(sizes) * tokens_per_req
    return g.state_gib_per_bs * max_bs + largest + every + per_graph * len(sizes)


def decode_graphs_gib(facts: MemoryFacts, config: ServerConfig) -> tuple[float, float]:
    """(target, draft) decode-graph memory of a configuration (GiB), without set-up or prefill graphs."""
    g = facts.graphs
    sizes = capture_sizes(config.cuda_graph_max_bs, config.speculative, config.max_running_requests)
    if not sizes:
        return 0.0, 0.0
    tokens = config.speculative_num_draft_tokens or 1
    target = _runner(g, sizes, tokens, g.target_gib_per_token, g.gib_per_graph, g.target_gib_per_size_token)
    if not config.speculative:
        return target, 0.0
    steps, topk = config.speculative_num_steps or 1, config.speculative_eagle_topk or 1
    per_graph = g.draft_gib_per_graph
    draft = _runner(g, sizes, tokens, g.draft_gib_per_token, per_graph)
    if steps > 1:
        draft += _runner(g, sizes, topk, g.draft_step_gib_per_token * steps, per_graph)
    tiers = tiers_of(config)
    for s in candidate_steps(tiers) if tiers else ():
        if s != steps:  # each other adaptive tier builds its own draft graphs and state
            draft += ADAPTIVE_TIER_STATE_GIB + _runner(g, sizes, s + 1, g.draft_gib_per_token, per_graph)
            if s > 1:
                draft += _runner(g, sizes, topk, g.draft_step_gib_per_token * s, per_graph)
    return target, draft


def _late_draft_gib(facts: MemoryFacts, config: ServerConfig, tokens: int) -> float:
    """Up to 0.5.9 the draft's weights and pool come after the target's graphs, out of the slack."""
    if facts.rule is not VersionRule.DRAFT_AFTER or not config.speculative:
        return 0.0
    return facts.draft_weights_gib + tokens * facts.draft_kv_cell_bytes / GIB


def _graph_need(facts: MemoryFacts, config: ServerConfig, room: float) -> tuple[float, bool]:
    """The set-up plus every graph, given the room after the target's pool; and whether prefill
    graphs are captured (SGLang checks what is free once the set-up is allocated)."""
    g = facts.graphs
    sizes = capture_sizes(config.cuda_graph_max_bs, config.speculative, config.max_running_requests)
    setup = g.eager_setup_gib + g.eager_setup_gib_per_bs * (max(sizes) if sizes else 0)
    prefill = g.prefill_graphs and room - setup >= g.prefill_min_free_gib
    target, draft = decode_graphs_gib(facts, config)
    need = setup + target + draft
    if prefill:
        need += g.target_prefill_gib + (g.draft_prefill_gib if config.speculative else 0.0)
    return need, prefill


def _kv(facts: MemoryFacts, config: ServerConfig, f: float) -> tuple[float, float, int, float]:
    """(weights loaded before the KV profile, rest for the pools, tokens, pools' GiB) at fraction f."""
    old = facts.rule is VersionRule.DRAFT_AFTER
    draft_w = facts.draft_weights_gib if config.speculative else 0.0
    loaded = facts.weights_gib + (0.0 if old else draft_w)
    pre = facts.pre_gib
    rest = pre - loaded - pre * (1 - f)
    cell_d = facts.draft_kv_cell_bytes if config.speculative else 0.0
    cells = facts.kv_cell_bytes + (0.0 if old else cell_d)
    # The pool is sized from what the weights leave (the real tokens match to 0.01 %), but the start
    # fails already when that is below what is allocated before the profile (the printed minimum viable).
    tokens = max(0, int(rest * GIB // cells)) if rest > facts.before_kv else 0
    return loaded, rest - facts.before_kv, tokens, tokens * (facts.kv_cell_bytes + cell_d) / GIB


def kv_tokens(facts: MemoryFacts, config: ServerConfig, f: float) -> int:
    """The tokens the pools hold at fraction ``f`` (0: the weights leave no KV pool)."""
    return _kv(facts, config, f)[2]


def graph_need(facts: MemoryFacts, config: ServerConfig, room: float) -> tuple[float, bool]:
    """The set-up plus every graph given ``room``, and whether the prefill graphs are captured."""
    return _graph_need(facts, config, room)


def room_after_pools(facts: MemoryFacts, config: ServerConfig, f: float) -> float:
    """Free once the pools are allocated (up to 0.5.9: the target's pool only)."""
    _, rest, _, _ = _kv(facts, config, f)
    return facts.pre_gib * (1 - f) - facts.pool_extra + min(rest, 0.0) + embed_freed_gib(facts, config)


def embed_freed_gib(facts: MemoryFacts, config: ServerConfig) -> float:
    """The draft's own embedding, freed between the pools and the captures: loaded before the pools
    (from 0.5.10), it goes once the draft takes the target's."""
    if config.speculative and facts.rule is VersionRule.BOTH_FIRST:
        return facts.draft_shared_embed_gib
    return 0.0


def graphs_fit(facts: MemoryFacts, config: ServerConfig, f: float, margin_gib: float = 0.0) -> bool:
    room = room_after_pools(facts, config, f)
    need, _ = _graph_need(facts, config, room)
    late = _late_draft_gib(facts, config, _kv(facts, config, f)[2])
    return need + late + margin_gib <= room


def ceiling_fraction(facts: MemoryFacts, config: ServerConfig, margin_gib: float = 0.0) -> float:
    """The highest fraction at which the graphs still fit (0 when none does): bisection, since the room
    shrinks as the fraction grows (the prefill gate makes the need a step, not a line)."""
    lo, hi = 0.0, 0.9999
    if graphs_fit(facts, config, hi, margin_gib):
        return hi
    if not graphs_fit(facts, config, lo, margin_gib):
        return 0.0
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if graphs_fit(facts, config, mid, margin_gib) else (lo, mid)
    return lo


def left_after_start(facts: MemoryFacts, config: ServerConfig) -> float:
    """Free once start-up is done (`Estimate.left_gb`), without the floor and ceiling searches."""
    f = config.mem_fraction_static
    room = room_after_pools(facts, config, f)
    need, _ = _graph_need(facts, config, room)
    return room - _late_draft_gib(facts, config, _kv(facts, config, f)[2]) - need


def floor_fraction(facts: MemoryFacts, config: ServerConfig) -> float:
    """SGLang's printed ``minimum viable = 1 - available/pre``."""
    loaded, _, _, _ = _kv(facts, config, 0.0)
    return 1 - (facts.pre_gib - loaded - facts.before_kv) / facts.pre_gib


def _failing_step(
    facts: MemoryFacts, config: ServerConfig, room: float, need: float, prefill: bool, tokens: int
) -> FailureStage:
    """Where the walk after the pools first runs out: the target's set-up and graphs, then (up to
    0.5.9) the draft's weights and pool, then the draft's graphs."""
    _, draft = decode_graphs_gib(facts, config)
    draft_graphs = draft + (facts.graphs.draft_prefill_gib if prefill and config.speculative else 0.0)
    steps = [(need - draft_graphs, FailureStage.TARGET_GRAPH_CAPTURE)]
    if facts.rule is VersionRule.DRAFT_AFTER and config.speculative:
        steps.append((facts.draft_weights_gib, FailureStage.WEIGHT_LOADING))
        steps.append((tokens * facts.draft_kv_cell_bytes / GIB, FailureStage.KV_ALLOCATION))
    steps.append((draft_graphs, FailureStage.DRAFT_GRAPH_CAPTURE))
    used = 0.0
    for size, stage in steps:
        used += size
        if used > room:
            return stage
    return FailureStage.DRAFT_GRAPH_CAPTURE


def estimate(facts: MemoryFacts, config: ServerConfig) -> Estimate:
    """The start-up of ``config`` on one GPU, as predicted before any launch."""
    f = config.mem_fraction_static
    _, rest, tokens, kv_gb = _kv(facts, config, f)
    room = room_after_pools(facts, config, f)
    need, prefill = _graph_need(facts, config, room)
    late = _late_draft_gib(facts, config, tokens)
    room -= late  # what the graphs themselves have
    floor = floor_fraction(facts, config)
    ceiling = ceiling_fraction(facts, config)
    draft_w = facts.draft_weights_gib if config.speculative else 0.0
    stage: FailureStage | None = None
    if rest <= 0 or tokens < 1:
        stage = FailureStage.KV_ALLOCATION
        reason = f"the weights leave no KV pool at fraction {fraction_text(f)} (minimum viable {floor:.4f})"
    elif need > room:
        stage = _failing_step(facts, config, room + late, need, prefill, tokens)
        reason = f"CUDA graphs need about {need:.2f} GiB, {room:.2f} GiB left at fraction {fraction_text(f)}"
        if late > 0:  # SGLang <= 0.5.9 loads the draft after the target's pools: name that share too
            reason = (
                f"{room + late:.2f} GiB left after the target's pools at fraction {fraction_text(f)}: "
                f"the draft's weights and KV pool take {late:.2f} GiB, its CUDA graphs and the target's need "
                f"{need:.2f} GiB"
            )
    else:
        reason = f"fits: {tokens} KV tokens, {room - need:.2f} GiB left after the graphs"
    return Estimate(
        weights_gb=facts.weights_gib,
        draft_weights_gb=draft_w,
        kv_tokens=tokens,
        kv_gb=kv_gb,
        graph_gb=need,
        room_gb=room,
        late_draft_gb=late,
        left_gb=room - need,
        floor_fraction=floor,
        ceiling_fraction=ceiling,
        prefill_graphs=prefill,
        fits=stage is None,
        stage=stage,
        reason=reason,
    )
