"""Two more memory rules learned from a sweep's own failures, on top of `MemoryModel`.

`MemoryModel` predicts the KV pool and the CUDA-graph room from the trials' memory figures, which covers
start-up OOMs at low fractions (no KV pool) and at large graph widths. Two kinds of failure it does not
predict keep costing launches in the search benchmark:

- **KV pressure under load.** A server that starts but whose KV pool cannot hold its running requests
  retracts them under load (the trial's probe fails it). Once a configuration failed this way, any
  configuration with the same speculative tree, no larger KV pool and at least as many running requests
  will too (same workload). Neither tokens per request nor draft tokens alone are enough: a small pool
  with few running requests admits fewer at once and passes where a larger pool with many fails, and
  the tree's acceptance changes how fast requests grow and leave. The pool at a fraction comes from the
  model's learned line, so the rule applies to fractions never launched.
- **A draft that no longer fits at high fractions.** Up to SGLang 0.5.9 the target sizes its KV pool
  before the draft loads, so the draft's weights and KV come out of the `1 - mem_fraction_static`
  slack: too high a fraction fails at weight loading or KV allocation *after* the target's pool exists.
  That failure sets a ceiling: every higher fraction fails the same way. (From 0.5.14 both models load
  first, the failure comes before any pool, and no ceiling is learned: the rule follows the failure's
  own figures, not a version number, so figures from one version are not misapplied to another.)

The product uses this by constructing `BoundedMemoryModel()` where it constructs `MemoryModel()`.
"""

from __future__ import annotations

from orchestrator.draft_tree import DraftTree
from orchestrator.memory_model import Correction, MemoryModel, Prediction
from orchestrator.records import FailureStage, ServerConfig, TrialResult, TrialStatus


class BoundedMemoryModel(MemoryModel):
    def __init__(self, tp: int = 1, kv_heads: int | None = None) -> None:
        super().__init__(tp=tp, kv_heads=kv_heads)
        # (KV pool tokens, running requests asked, tree or None) of each configuration that failed under load
        self.pressure: list[tuple[float, int, DraftTree | None]] = []
        self.draft_ceiling: float | None = None  # the lowest fraction seen to leave the draft no room

    def observe(self, number: int, result: TrialResult, tp: int | None = None) -> list[Correction]:
        corrections = super().observe(number, result, tp)
        if tp is not None and tp != self.tp:
            return corrections  # pools and fractions of another GPU count bound nothing here
        pool = result.memory.kv_cache_tokens
        resolved = result.resolved_args.mem_fraction_static
        f = resolved if resolved is not None else result.config.mem_fraction_static
        if result.status is TrialStatus.KV_PRESSURE and pool:
            c = result.config
            self.pressure.append((float(pool), c.max_running_requests, DraftTree.of(c)))
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
        if self.pressure and self.ready:
            pool = self.kv_tokens(f)
            tree, running = DraftTree.of(config), config.max_running_requests
            worse = [p for p, r, t in self.pressure if pool <= p and running >= r and tree == t]
            if worse:
                return Prediction(
                    False,
                    True,
                    FailureStage.UNDER_LOAD,
                    base.kv_tokens,
                    base.graph_room_gb,
                    base.graph_need_gb,
                    f"a KV pool of about {pool:.0f} tokens for {running} running requests; {max(worse):.0f} "
                    "with the same tree and no more requests already retracted under load",
                )
        return base
