"""Two more memory rules learned from a sweep's own failures, on top of `MemoryModel`.

`MemoryModel` predicts the KV pool and the CUDA-graph room from the trials' memory figures, which covers
start-up OOMs at low fractions (no KV pool) and at large graph widths. Two kinds of failure it does not
predict keep costing launches in the search benchmark:

- **KV pressure under load.** A server that starts but whose KV pool cannot hold its running requests
  retracts them under load (the trial's probe fails it). What matters is the pool per running request:
  once a configuration with `pool / max_running_requests` tokens per request failed this way, any
  configuration with no more tokens per request will too (same workload). The pool at a fraction comes
  from the model's learned line, so the rule applies to fractions never launched.
- **A draft that no longer fits at high fractions.** Up to SGLang 0.5.9 the target sizes its KV pool
  before the draft loads, so the draft's weights and KV come out of the `1 - mem_fraction_static`
  slack: too high a fraction fails at weight loading or KV allocation *after* the target's pool exists.
  That failure sets a ceiling: every higher fraction fails the same way. (From 0.5.14 both models load
  first, the failure comes before any pool, and no ceiling is learned: the rule follows the failure's
  own figures, not a version number, so figures from one version are not misapplied to another.)

The product uses this by constructing `BoundedMemoryModel()` where it constructs `MemoryModel()`.
"""

from __future__ import annotations

from orchestrator.memory_model import Correction, MemoryModel, Prediction
from orchestrator.records import FailureStage, ServerConfig, TrialResult, TrialStatus


class BoundedMemoryModel(MemoryModel):
    def __init__(self) -> None:
        super().__init__()
        self.pressure_per_request: float = 0.0  # the most KV tokens per request seen to fail under load
        self.draft_ceiling: float | None = None  # the lowest fraction seen to leave the draft no room

    def observe(self, number: int, result: TrialResult) -> list[Correction]:
        corrections = super().observe(number, result)
        pool = result.memory.get("kv_cache_tokens")
        f = float(result.resolved_args.get("mem_fraction_static", result.config.mem_fraction_static))
        if result.status is TrialStatus.KV_PRESSURE and pool:
            # Per *asked* running request, the figure `predict` can compute before a launch.
            per_request = pool / max(1, result.config.max_running_requests)
            self.pressure_per_request = max(self.pressure_per_request, per_request)
        draft_side = result.failure is not None and result.failure.stage in (
            FailureStage.WEIGHT_LOADING,
            FailureStage.KV_ALLOCATION,
        )
        if result.status is TrialStatus.OOM and draft_side and pool:
            # The target's pool was allocated, then the draft did not fit in what was left.
            self.draft_ceiling = f if self.draft_ceiling is None else min(self.draft_ceiling, f)
        return corrections

    def predict(self, config: ServerConfig) -> Prediction:
        base = super().predict(config)
        if base.skip:
            return base
        f = config.mem_fraction_static
        if self.draft_ceiling is not None and config.speculative and f >= self.draft_ceiling:
            return Prediction(
                False,
                True,
                FailureStage.KV_ALLOCATION,
                base.kv_tokens,
                base.graph_room_gb,
                base.graph_need_gb,
                f"mem_fraction_static {f:.3f} is at or above {self.draft_ceiling:.3f}, which left the draft "
                "no room",
            )
        if self.pressure_per_request > 0 and self.ready:
            per_request = self.kv_tokens(f) / max(1, config.max_running_requests)
            if per_request <= self.pressure_per_request:
                return Prediction(
                    False,
                    True,
                    FailureStage.UNDER_LOAD,
                    base.kv_tokens,
                    base.graph_room_gb,
                    base.graph_need_gb,
                    f"about {per_request:.0f} KV tokens per running request; {self.pressure_per_request:.0f}"
                    " already retracted under load",
                )
        return base
