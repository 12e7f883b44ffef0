"""Three more memory rules learned from a sweep's own failures, on top of `MemoryModel`.

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

- **Out of memory while serving.** A server that started with little memory left runs out of it under
  load, in a forward's own buffers (on the H200, s4k2d8 at fraction 0.98 with 3.3 GB left after
  start-up failed at concurrency 32, while s1k2d2 at the same fraction served). What a forward takes grows
  with the tokens it runs, running requests x draft tokens a verify: once a configuration failed this
  way, any configuration predicted to leave no more memory after start-up and running at least as many
  tokens a verify will too.

The product does not construct this class itself: `prior_model.PriorMemoryModel`, the model every sweep
runs with (`driver.loop.node_memory.memory_model_for`), is a `BoundedMemoryModel` with the analytic prior
under it.
"""

from __future__ import annotations

from orchestrator.config.draft_tree import DraftTree
from orchestrator.driver.memory.learned import Correction, MemoryModel, Prediction
from orchestrator.records import FailureStage, ServerConfig, TrialResult, TrialStatus, fraction_text


class BoundedMemoryModel(MemoryModel):
    def __init__(self, tp: int = 1, kv_heads: int | None = None) -> None:
        super().__init__(tp=tp, kv_heads=kv_heads)
        # (KV pool tokens, running requests asked, tree or None) of each configuration that failed under load
        self.pressure: list[tuple[float, int, DraftTree | None]] = []
        self.draft_ceiling: float | None = None  # the lowest fraction seen to leave the draft no room
        # (GB left after start-up, tokens a verify runs, trial) of each configuration out of memory serving
        self.serving: list[tuple[float, int, int]] = []

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
        if result.status is TrialStatus.OOM_UNDER_LOAD:
            left = self._left_gb(super().predict(result.config))
            if left is None:
                left = result.memory.avail_end_gb
            if left is not None:
                self.serving.append((left, _verify_tokens(result.config), number))
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
            return _refused(
                base,
                FailureStage.KV_ALLOCATION,
                f"mem_fraction_static {fraction_text(f)} is at or above {self.draft_ceiling:.3f}, "
                "which left the draft no room",
            )
        left = self._left_gb(base)
        tokens = _verify_tokens(config)
        failed = [s for s in self.serving if left is not None and left <= s[0] and tokens >= s[1]]
        if failed:
            gb, runs, number = min(failed, key=lambda s: s[1])
            return _refused(
                base,
                FailureStage.UNDER_LOAD,
                f"about {left:.2f} GiB left after start-up for {tokens} tokens a verify; trial {number} ran "
                f"out of memory under load with {gb:.2f} GiB for {runs}",
            )
        if self.pressure and self.ready:
            pool = self.kv_tokens(f)
            tree, running = DraftTree.of(config), config.max_running_requests
            worse = [p for p, r, t in self.pressure if pool <= p and running >= r and tree == t]
            if worse:
                return _refused(
                    base,
                    FailureStage.UNDER_LOAD,
                    f"a KV pool of about {pool:.0f} tokens for {running} running requests; {max(worse):.0f} "
                    "with the same tree and no more requests already retracted under load",
                )
        return base

    @staticmethod
    def _left_gb(prediction: Prediction) -> float | None:
        """Memory left after start-up, as the model predicts it (what a forward's buffers come out of)."""
        if prediction.graph_room_gb is None or prediction.graph_need_gb is None:
            return None
        return prediction.graph_room_gb - prediction.graph_need_gb


def _verify_tokens(config: ServerConfig) -> int:
    """Tokens one forward runs at full load: running requests x the tokens each verifies (1 without
    speculation)."""
    if not config.speculative:
        return config.max_running_requests
    per_request = config.speculative_num_draft_tokens or (config.speculative_num_steps or 0) + 1
    return config.max_running_requests * per_request


def _refused(base: Prediction, stage: FailureStage, reason: str) -> Prediction:
    """A confident failure at ``stage`` learned from a sweep's own launches: the model's figures stay
    ``base``'s (the bound refuses the configuration, it does not re-predict its memory), and it is no
    refusal of the analytic prior."""
    return Prediction(
        False,
        True,
        stage,
        base.kv_tokens,
        base.graph_room_gb,
        base.graph_need_gb,
        reason,
    )
