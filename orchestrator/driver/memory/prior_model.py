"""The memory model a sweep runs with: the analytic prior first, corrected by the launches.

Before the first launch the prior (`prior.estimate`) knows the floor fraction (the weights leave no KV pool)
and the graph ceiling of every configuration, so the sweep never launches what cannot fit (recorded as
`predicted_oom` with the figures, at no budget). The learned model (`learned.MemoryModel`, under
`bounds.BoundedMemoryModel`) stays on top as the correction: its KV line, floor and bounds come from the
trials' own logs, and each launch rescales the prior's graph costs to what the log measured (`graph_scale`:
the largest ratio of measured to predicted seen, or what a graph OOM proves was not enough). Under load, the
forwards' peak (`serving`) and the KV probe's admission (`kv_admission`) refuse what would start but not
serve.

Where the prior's figures come from is `node_facts` (a simulated node's profile, or the models' config.json
and the GPU's memory); `driver.loop.node_memory.memory_model_for` builds a sweep's model from its spec.
Without facts (a config.json the prior cannot use, or no GPU memory known yet) this is the learned model
alone, until the first launch's GPU check tells the GPU's memory.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from orchestrator.driver.memory.bounds import BoundedMemoryModel
from orchestrator.driver.memory.facts import MemoryFacts, VersionRule, with_graph_scale
from orchestrator.driver.memory.kv_admission import retracts
from orchestrator.driver.memory.learned import Correction, Prediction, started
from orchestrator.driver.memory.node_facts import shaped_facts
from orchestrator.driver.memory.prior import (
    Estimate,
    capture_sizes,
    embed_freed_gib,
    estimate,
    left_after_start,
)
from orchestrator.driver.memory.serving import ServingPeak, ServingWorkload, serving_ceiling, serving_peak
from orchestrator.footprint.shape import ModelShape
from orchestrator.records import FailureStage, ServerConfig, TrialResult, TrialStatus, fraction_text

log = logging.getLogger(__name__)

PRIOR = "prior: "  # how the prior's own reasons start (words only: `Prediction.from_prior` says whose)
FLOOR_MARGIN = 0.005  # of the fraction: launch no closer than this to the predicted minimum viable


class PriorMemoryModel(BoundedMemoryModel):
    """`BoundedMemoryModel` with the analytic prior under it (no facts: learning only, as before)."""

    def __init__(
        self,
        tp: int = 1,
        kv_heads: int | None = None,
        facts: MemoryFacts | None = None,
        shapes: tuple[ModelShape, ModelShape | None] | None = None,
        sglang_version: str = "0.5.17",
        prefill_graphs: bool = True,
        workload: tuple[int, int] | None = None,
        kv_dtype_bytes: float | None = None,
        serving: ServingWorkload | None = None,
        gpu_source: str | None = None,
    ) -> None:
        super().__init__(tp=tp, kv_heads=kv_heads)
        # The spec key that stated the GPU memory (None: the driver's own GPU told it), named with its fix
        # when a node's GPUs differ.
        self.gpu_source = gpu_source
        self._kv_dtype_bytes = kv_dtype_bytes
        self.facts = facts
        # The workload's (input, output) tokens: the trial's KV probe sends max_running_requests such
        # requests at once and fails a pool on which SGLang retracts; None: no such rule.
        self.workload = workload
        self.pressure_rule = workload is not None  # off once a launch contradicts it
        self._shapes = shapes  # kept to build the facts once a launch tells the GPU's memory
        self._version = sglang_version
        self._prefill_graphs = prefill_graphs
        self.graph_scale: float | None = None  # measured / predicted graph memory; None: none seen
        self.serving_workload = serving  # the heaviest load the forwards must fit; None: no such rule
        # (configuration at its resolved fraction, GiB free after start-up) of each launch that started
        self._started: list[tuple[ServerConfig, float]] = []

    @property
    def scaled_facts(self) -> MemoryFacts | None:
        if self.facts is None or self.graph_scale is None:
            return self.facts
        return with_graph_scale(self.facts, self.graph_scale)

    def prior_estimate(self, config: ServerConfig) -> Estimate | None:
        facts = self.scaled_facts
        return estimate(facts, config) if facts is not None else None

    # -- correction ----------------------------------------------------------------------------------

    def observe(self, number: int, result: TrialResult, tp: int | None = None) -> list[Correction]:
        corrections = super().observe(number, result, tp)
        if tp is not None and tp != self.tp:
            return corrections
        node_total = min(g.total_mib for g in result.gpu_before) if result.gpu_before else None
        known = self.facts.gpu_total_mib if self.facts is not None else None
        if (
            self._shapes is not None
            and node_total
            and (known is None or abs(node_total - known) > 0.01 * known)
        ):
            # No GPU memory known yet, or the driver's own GPUs are not the nodes': the node's NVML wins.
            total = node_total
            if known is not None:
                # A spec written for one GPU and run on another predicts every fit for the wrong card
                # until now: say it where the user reads, once (the facts then hold the node's figure).
                fix = ""
                if self.gpu_source:
                    fix = f"; remove {self.gpu_source} (the nodes' GPU check tells it) or set it to "
                    fix += f"{node_total:.0f}"
                log.warning(
                    "memory prior: %s gives %.0f MiB per GPU, but trial %d's node has %.0f MiB; predicting "
                    "for the node's GPUs from now on%s",
                    self.gpu_source or "the driver's own GPU",
                    known,
                    number,
                    node_total,
                    fix,
                )
            target, draft = self._shapes
            self.facts = shaped_facts(
                target, draft, total, self.tp, self._version, self._prefill_graphs, self._kv_dtype_bytes
            )
            log.info("memory prior: %.0f MiB per GPU, from trial %d's GPU check", total, number)
        if self.facts is not None:
            self._measured_weights(result)
            self._rescale(result)
        end = result.memory.avail_end_gb
        if started(result) and end is not None:
            resolved = result.resolved_args.mem_fraction_static
            config = result.config
            if resolved is not None:
                config = replace(config, mem_fraction_static=resolved)
            self._started.append((config, end))
        pool = result.memory.max_total_num_tokens or result.memory.kv_cache_tokens
        if (
            self.pressure_rule
            and result.status is TrialStatus.OK
            and pool
            and self._retracts(result.config, pool)
        ):
            # Served without retractions where the replay said it would retract: too strict here.
            self.pressure_rule = False
            log.info("memory prior: trial %d served on a short KV pool; the pressure rule is off", number)
        return corrections

    def _measured_weights(self, result: TrialResult) -> None:
        """A log's own figures replace the predicted ones: what is free before loading, and the weights
        (so the floor, and the KV pool at any fraction, follow the node from then on)."""
        assert self.facts is not None
        m = result.memory
        facts = self.facts
        if m.avail_at_start_gb:
            dist = (facts.gpu_total_mib - facts.driver_reserve_mib) / 1024.0 - facts.cuda_context_gib
            facts = replace(facts, dist_init_gib=dist - m.avail_at_start_gb)
        if m.weights_gb is not None:
            facts = replace(facts, weights_gib=m.weights_gb)
        if m.draft_weights_gb is not None and result.config.speculative:
            facts = replace(facts, draft_weights_gib=m.draft_weights_gb)
        self.facts = facts

    def _rescale(self, result: TrialResult) -> None:
        assert self.facts is not None
        m, config = result.memory, result.config
        resolved = result.resolved_args.mem_fraction_static
        if resolved is not None:
            config = replace(config, mem_fraction_static=resolved)
        raw = estimate(self.facts, config)  # the unscaled prior at this configuration
        if raw.graph_gb <= 0 or m.avail_after_kv_gb is None:
            return
        late = 0.0
        if self.facts.rule is VersionRule.DRAFT_AFTER:
            late = (m.draft_weights_gb or 0.0) + (m.draft_kv_cache_gb or 0.0)
        # What the captures had: the log's figure after the pools, plus the draft's embedding freed after
        # it (the prior's room counts it, so the measured room must too).
        room = m.avail_after_kv_gb + embed_freed_gib(self.facts, config)
        graph_oom = result.failure is not None and result.failure.stage in (
            FailureStage.TARGET_GRAPH_CAPTURE,
            FailureStage.DRAFT_GRAPH_CAPTURE,
        )
        if started(result) and m.avail_end_gb is not None:
            ratio = (room - m.avail_end_gb - late) / raw.graph_gb
            # Only ever raised: a launch whose graphs took less than predicted (on the H200 shapes little
            # of the set-up the tiny model fitted is spent: the server without speculation measures 0.3 of
            # its prediction) says nothing of what a larger tree's graphs take per token, and scaling
            # them down by it made the prior promise 0.3 GiB the 8B shape's s4k4d16 did not have. What it
            # overestimated is taken in by `left_after_start`'s correction instead.
            if ratio > 1.0:
                self.graph_scale = max(self.graph_scale or 1.0, ratio)
        elif result.status is TrialStatus.OOM and graph_oom:
            # What was free was not enough: the graphs need more than that.
            at_least = (room - late + 0.01) / raw.graph_gb
            self.graph_scale = max(self.graph_scale or 1.0, at_least)

    # -- predicting ----------------------------------------------------------------------------------

    def left_after_start(self, config: ServerConfig) -> float | None:
        """GiB free once start-up is done: the prior's figure, moved by the least it erred by on any
        launch that started here with or without speculation as ``config`` is (it credits none of what
        the allocator gives back before the captures: 0.5 GiB on the H200's shapes without speculation,
        0.9-1.7 with, a figure per shape and kind whatever the tree); the other kind's launches when
        none of its own started yet (the smaller correction: safe); None without facts."""
        facts = self.scaled_facts
        if facts is None:
            return None
        left = left_after_start(facts, config)
        same = [(ref, end) for ref, end in self._started if ref.speculative == config.speculative]
        if refs := same or self._started:
            per_bs, top = facts.graphs.credit_gib_per_bs, _largest_size(config)
            left += min(
                end - left_after_start(facts, ref) - per_bs * max(0, _largest_size(ref) - top)
                for ref, end in refs
            )
        return left

    def serving_peak(self, config: ServerConfig) -> ServingPeak | None:
        """What the forwards take under the workload's heaviest load (`serving`); None when unmodelled."""
        facts, workload = self.facts, self.serving_workload
        if facts is None or facts.serving is None or workload is None:
            return None
        return serving_peak(facts.serving, config, workload.load(facts.gpu_total_mib, self.tp))

    def _serving_refusal(self, config: ServerConfig, est: Estimate) -> Prediction | None:
        peak = self.serving_peak(config)
        left = self.left_after_start(config)
        if peak is None or left is None or peak.total_gib <= left:
            return None
        assert self.serving_workload is not None
        reason = (
            f"{PRIOR}under load at concurrency {self.serving_workload.concurrency} the forwards need about "
            f"{peak.total_gib:.2f} GiB ({peak.terms()}), {left:.2f} GiB left after start-up at fraction "
            f"{fraction_text(config.mem_fraction_static)}"
        )
        return Prediction(
            False,
            True,
            FailureStage.UNDER_LOAD,
            float(est.kv_tokens),
            est.room_gb,
            est.graph_gb,
            reason,
            from_prior=True,
        )

    def serving_ceiling(self, config: ServerConfig) -> float | None:
        """The highest fraction whose start-up leaves room for the serving peak (0 when none does);
        None when the peak is not modelled."""
        peak = self.serving_peak(config)
        if peak is None:
            return None
        return serving_ceiling(
            lambda f: self.left_after_start(replace(config, mem_fraction_static=f)), peak.total_gib
        )

    def _retracts(self, config: ServerConfig, pool: int) -> bool:
        """Whether the KV probe (max_running_requests of the workload's requests at once) would see
        SGLang retract on this pool: the scheduler's own rules replayed (`kv_admission`), growing one
        token a step (the acceptance is the draft's and differs per tree: one is the case that retracts
        the most; on the search benchmark's cases a larger guess missed some retractions)."""
        if self.workload is None:
            return False
        input_len, output_len = self.workload
        if pool >= config.max_running_requests * (input_len + output_len):
            return False  # the probe does not even run
        per_step = config.speculative_num_draft_tokens or 1
        return retracts(pool, config.max_running_requests, input_len, output_len, per_step)

    def predict(self, config: ServerConfig) -> Prediction:
        base = super().predict(config)
        est = self.prior_estimate(config)
        if base.skip or est is None:
            return base
        f = config.mem_fraction_static
        if f < est.floor_fraction + FLOOR_MARGIN:
            reason = (
                f"{PRIOR}the weights ({est.weights_gb:.2f} + {est.draft_weights_gb:.2f} GiB) leave no KV "
                f"pool at fraction {fraction_text(f)} (minimum viable {est.floor_fraction:.4f})"
            )
            return Prediction(
                False,
                True,
                FailureStage.KV_ALLOCATION,
                0.0,
                est.room_gb,
                est.graph_gb,
                reason,
                from_prior=True,
            )
        if self.pressure_rule and self.workload and self._retracts(config, est.kv_tokens):
            per_request = sum(self.workload)
            demand = config.max_running_requests * per_request
            reason = (
                f"prior, under load: a KV pool of about {est.kv_tokens} tokens cannot hold "
                f"{config.max_running_requests} running requests of {per_request} tokens "
                f"({demand}): SGLang would retract them under load"
            )
            return Prediction(False, True, FailureStage.UNDER_LOAD, float(est.kv_tokens), None, None, reason)
        facts = self.facts
        assert facts is not None
        margin = facts.graph_margin_gib + facts.graph_margin_rel * est.graph_gb
        # What start-up leaves, by the prior (room - late - need) or as the launches here corrected it,
        # whichever is less: a launch that left less than predicted narrows what fits; one that left more
        # does not widen it (its correction holds whatever the prior missed on that launch, such as
        # prefill graphs it did not capture, and the prior's own error is on the safe side).
        corrected = self.left_after_start(config)
        left = est.left_gb if corrected is None else min(est.left_gb, corrected)
        if left < margin:
            stage = est.stage  # None: it fits, but not by the margin
            if stage is None:
                spec = config.speculative
                stage = FailureStage.DRAFT_GRAPH_CAPTURE if spec else FailureStage.TARGET_GRAPH_CAPTURE
            late = (
                f" after the draft's weights and KV pool ({est.late_draft_gb:.2f} GiB, loaded after the "
                "target's pool in SGLang <= 0.5.9)"
                if est.late_draft_gb
                else ""
            )
            reason = (
                f"{PRIOR}CUDA graphs need about {est.graph_gb:.2f} GiB (+{margin:.2f} margin), "
                f"{est.room_gb:.2f} GiB left{late} at fraction {fraction_text(f)} "
                f"(ceiling {est.ceiling_fraction:.3f})"
            )
            return Prediction(
                False, True, stage, float(est.kv_tokens), est.room_gb, est.graph_gb, reason, from_prior=True
            )
        return self._serving_refusal(config, est) or base


def from_prior(prediction: Prediction) -> bool:
    """Whether the prior (not a learned bound) refused the configuration: a known-good configuration
    is launched against the learned bounds (they may come from another node), not against the prior."""
    return prediction.from_prior


def _largest_size(config: ServerConfig) -> int:
    """The largest batch size a configuration captures graphs for (0: none)."""
    sizes = capture_sizes(config.cuda_graph_max_bs, config.speculative, config.max_running_requests)
    return max(sizes, default=0)
