"""When the weights alone exceed a GPU: which tp size would hold them.

A model too big for its GPUs is not a fraction to tune: SGLang's "minimum viable" fraction is above 1 and
no launch at this tp can start. The answer a user needs is the smallest tp SGLang accepts for both models
(`spec.launch_rules.valid_tps`: it divides the heads) at which the same configuration fits, else at which the
weights at least leave a KV pool; the prior's own arithmetic (`prior.estimate`) decides both.
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.driver.memory.facts import MemoryFacts, facts_from_shapes, without_prefill_graphs
from orchestrator.driver.memory.prior import estimate, floor_fraction
from orchestrator.footprint.shape import ModelShape
from orchestrator.records import ServerConfig
from orchestrator.spec.launch_rules import valid_tps


def weights_exceed(facts: MemoryFacts, config: ServerConfig) -> bool:
    """Whether the weights (both models' under speculation) leave no KV pool at any fraction."""
    return floor_fraction(facts, config) >= 1.0


@dataclass(frozen=True)
class TpAdvice:
    """The smallest tp that holds the models: its weights per GPU and whether the configuration fits."""

    tp: int
    weights_gib: float  # target + draft, per GPU
    fits: bool  # False: the weights leave a KV pool there, the configuration as given still does not fit
    floor_fraction: float

    def line(self) -> str:
        if self.fits:
            return f"tp {self.tp} would fit ({self.weights_gib:.2f} GiB of weights per GPU): --tp {self.tp}"
        return (
            f"tp {self.tp} is the smallest whose weights leave a KV pool ({self.weights_gib:.2f} GiB per "
            f"GPU, minimum viable fraction {self.floor_fraction:.4f}); this configuration needs other "
            "memory flags there"
        )


@dataclass(frozen=True)
class NodeShape:
    """What the arithmetic needs of a node beside the tp: the models and one GPU."""

    target: ModelShape
    draft: ModelShape | None
    gpu_total_mib: float
    sglang_version: str = "0.5.17"
    prefill_graphs: bool = True
    kv_dtype_bytes: float | None = None

    def facts(self, tp: int) -> MemoryFacts:
        facts = facts_from_shapes(
            self.target, self.draft, self.gpu_total_mib, tp, self.sglang_version, self.kv_dtype_bytes
        )
        return facts if self.prefill_graphs else without_prefill_graphs(facts)


def smallest_tp(node: NodeShape, config: ServerConfig, above: int = 1) -> TpAdvice | None:
    """The smallest tp above ``above`` that SGLang accepts for both models and at which ``config`` fits;
    else the smallest whose weights leave a KV pool at its fraction; None when no tp up to the largest
    advised does either."""
    shapes = [node.target, *([node.draft] if node.draft and config.speculative else [])]
    candidates = [tp for tp in valid_tps(shapes) if tp > above]

    def advice(tp: int, fits: bool) -> TpAdvice:
        facts = node.facts(tp)
        draft = facts.draft_weights_gib if config.speculative else 0.0
        return TpAdvice(tp, facts.weights_gib + draft, fits, floor_fraction(facts, config))

    for tp in candidates:
        if estimate(node.facts(tp), config).fits:
            return advice(tp, True)
    for tp in candidates:
        if floor_fraction(node.facts(tp), config) < config.mem_fraction_static:
            return advice(tp, False)
    return None
