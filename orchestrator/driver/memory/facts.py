"""The prior's inputs: what it knows of one GPU of a node and of the models on it (`MemoryFacts`, per GPU
at the sweep's tp), and those facts read from both models' config.json shapes (`facts_from_shapes`) or
adjusted by what a launch taught (`with_graph_scale`, `without_prefill_graphs`). The arithmetic over them
is `prior`'s; where a node's figures come from, `node_facts`'.

The constants are fitted on the real logs under tests/fixtures/sglang (SGLang 0.5.17, H200), as `prior`'s
docstring tells: the CUDA context, what distributed init takes, what is allocated between the weights and
the KV profile and with the pools.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from enum import StrEnum

from orchestrator.driver.memory.serving import ServingCosts, serving_costs_for
from orchestrator.footprint.graph_costs import GraphCosts, graph_costs_for
from orchestrator.footprint.shape import ModelShape

MIB_PER_GIB = 1024.0
H200_DRIVER_RESERVE_MIB = 615.0  # NVML `used` with no process on the H200 (what torch cannot have)


class VersionRule(StrEnum):
    """Which accounting the SGLang version follows (`prior`'s docstring tells both)."""

    DRAFT_AFTER = "<=0.5.9"
    BOTH_FIRST = ">=0.5.14"


def rule_for_version(version: str) -> VersionRule:
    parts = [int(p) for p in version.split(".")[:3] if p.isdigit()]
    return VersionRule.DRAFT_AFTER if tuple(parts) < (0, 5, 14) else VersionRule.BOTH_FIRST


@dataclass(frozen=True)
class MemoryFacts:
    """Everything the prior knows of one GPU of the node and of the models on it."""

    tp: int
    gpu_total_mib: float
    weights_gib: float
    draft_weights_gib: float
    kv_cell_bytes: float  # target KV bytes per token on one GPU
    draft_kv_cell_bytes: float
    rule: VersionRule = VersionRule.BOTH_FIRST
    driver_reserve_mib: float = H200_DRIVER_RESERVE_MIB
    cuda_context_gib: float = 0.62
    dist_init_gib: float | None = None  # None: 0.09 at tp 1, 1.00 above
    before_kv_gib: float | None = None  # allocated between the weights and the KV profile; None: 0.10/tp
    pool_extra_gib: float | None = None  # allocated with the pools; None: 0.08 at tp 1, 0.19 above
    # The draft's own embedding, freed after the pools when the draft takes the target's (SGLang's
    # EAGLE-3 ``set_embed`` deletes it and empties the cache): free again before the captures. The
    # H200 logs show it as free memory rising between the pools and the first capture (0.84 GB on the
    # Llama-3-8B shape, 1.39 on the Qwen3-32B: the embedding less the attention set-up that comes first).
    draft_shared_embed_gib: float = 0.0
    graphs: GraphCosts = field(default_factory=GraphCosts)  # the tiny model's (tests/fixtures/sglang/0.5.17)
    # How far inside the graph ceiling a launch must stay: the graph costs are the least certain figures
    # (fitted on a tiny model), so 0.25 GiB and 5 % of the need unless the figures are the node's own.
    graph_margin_gib: float = 0.25
    graph_margin_rel: float = 0.05
    # What forwards take under load, out of what start-up leaves (`serving`); None: not modelled
    serving: ServingCosts | None = None
    source: str = ""  # where the figures came from, for messages

    @property
    def pre_gib(self) -> float:
        """SGLang's ``pre_model_load_memory``: free once CUDA and the process group are up."""
        dist = self.dist_init_gib if self.dist_init_gib is not None else (0.09 if self.tp == 1 else 1.00)
        total = (self.gpu_total_mib - self.driver_reserve_mib) / MIB_PER_GIB
        return total - self.cuda_context_gib - dist

    @property
    def before_kv(self) -> float:
        return self.before_kv_gib if self.before_kv_gib is not None else 0.10 / self.tp

    @property
    def pool_extra(self) -> float:
        if self.pool_extra_gib is not None:
            return self.pool_extra_gib
        return 0.08 if self.tp == 1 else 0.19


def facts_from_shapes(
    target: ModelShape,
    draft: ModelShape | None,
    gpu_total_mib: float,
    tp: int = 1,
    sglang_version: str = "0.5.17",
    kv_dtype_bytes: float | None = None,
) -> MemoryFacts:
    """The facts of a node from both models' config.json shapes and one GPU's total memory."""
    return MemoryFacts(
        tp=tp,
        gpu_total_mib=gpu_total_mib,
        weights_gib=target.weights_gib(tp, first_load=True),
        draft_weights_gib=draft.weights_gib(tp, first_load=False) if draft else 0.0,
        kv_cell_bytes=target.kv_bytes_per_token(tp, kv_dtype_bytes),
        draft_kv_cell_bytes=draft.kv_bytes_per_token(tp, kv_dtype_bytes) if draft else 0.0,
        rule=rule_for_version(sglang_version),
        draft_shared_embed_gib=draft.shared_embedding_gib(tp) if draft else 0.0,
        graphs=graph_costs_for(target, draft, tp),
        serving=serving_costs_for(target, draft, tp),
        source=f"{target.path}" + (f" + {draft.path}" if draft else ""),
    )


def without_prefill_graphs(facts: MemoryFacts) -> MemoryFacts:
    return replace(facts, graphs=replace(facts.graphs, prefill_graphs=False))


def with_graph_scale(facts: MemoryFacts, scale: float) -> MemoryFacts:
    """The same facts with every graph cost multiplied by ``scale`` (a launch's correction); the prefill
    gate and the allocator's credit are no costs and stay."""
    g = facts.graphs
    scaled = {f.name: getattr(g, f.name) * scale for f in fields(g) if f.name not in _NOT_COSTS}
    return replace(facts, graphs=replace(g, **scaled))


_NOT_COSTS = frozenset({"prefill_min_free_gib", "prefill_graphs", "credit_gib_per_bs"})
