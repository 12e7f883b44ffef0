"""The memory model a sweep runs with: the analytic prior first, corrected by the launches.

Before the first launch `memory_prior.estimate` knows the floor fraction (the weights leave no KV pool)
and the graph ceiling of every configuration, so the sweep never launches what cannot fit (recorded as
`predicted_oom` with the figures, at no budget). The learned model (`MemoryModel`, `BoundedMemoryModel`)
stays on top as the correction: its KV line, floor and bounds come from the trials' own logs, and each
launch rescales the prior's graph costs to what the log measured (`graph_scale`: the largest ratio of
measured to predicted seen, or what a graph OOM proves was not enough).

Where the figures come from (`prior_facts`): on the simulated backend from the node's profile (which
names its models' config.json where it has them, `sim.shape_memory`, and its GPU's memory as the fake
NVML shows it); on real nodes from the models' config.json read on the driver, and the GPU memory from
``memory.gpu_memory_mib``, else the driver's own NVML, else the first launch's GPU check (a node's NVML
reading travels back with every trial): the driver often has no GPU, and the baseline launch, which runs
first, is then the probe. A config.json that cannot be read, or names a quantization or architecture the
arithmetic does not know, is a warning naming the file and the field: the sweep goes on learning only.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from orchestrator.driver.memory.bounds import BoundedMemoryModel
from orchestrator.driver.memory.kv_admission import retracts
from orchestrator.driver.memory.learned import Correction, Prediction, kv_heads_of, kv_shards, started
from orchestrator.driver.memory.prior import (
    Estimate,
    GraphCosts,
    MemoryFacts,
    VersionRule,
    estimate,
    facts_from_shapes,
    left_after_start,
    with_graph_scale,
    without_prefill_graphs,
)
from orchestrator.driver.memory.serving import (
    ServingPeak,
    ServingWorkload,
    serving_ceiling,
    serving_peak,
    simulated_costs,
)
from orchestrator.footprint.shape import ModelShape, ShapeError, load_shape
from orchestrator.records import FailureStage, ServerConfig, TrialResult, TrialStatus
from orchestrator.secrets import flag_value
from orchestrator.sim.profile import SimProfile, load_profile
from orchestrator.spec.sweep_spec import Backend, SweepSpec

log = logging.getLogger(__name__)

PRIOR = "prior: "  # how the prior's own reasons start (words only: `Prediction.from_prior` says whose)
FLOOR_MARGIN = 0.005  # of the fraction: launch no closer than this to the predicted minimum viable


def facts_from_profile(profile: SimProfile, tp: int) -> MemoryFacts:
    """A simulated node's facts, as its profile (the node's config.json and NVML) states them."""
    cell_t, cell_d = profile.target_kv_bytes_per_token, profile.draft_kv_bytes_per_token
    if profile.target_kv_sharded:
        cell_t /= kv_shards(tp, profile.target_kv_heads)
    if profile.draft_kv_sharded:
        cell_d /= kv_shards(tp, profile.draft_kv_heads)
    floor = profile.pool_overhead_gib / (tp if profile.kv_floor_sharded else 1)
    return MemoryFacts(
        tp=tp,
        gpu_total_mib=profile.gpu_total_mib,
        weights_gib=profile.target_weights_gib / tp,
        draft_weights_gib=profile.draft_weights_gib / (tp if profile.draft_weights_sharded else 1),
        kv_cell_bytes=cell_t,
        draft_kv_cell_bytes=cell_d,
        rule=VersionRule(profile.version_behaviour),
        driver_reserve_mib=profile.driver_reserve_mib,
        cuda_context_gib=profile.cuda_context_gib,
        dist_init_gib=profile.dist_init_gib,
        before_kv_gib=floor,
        pool_extra_gib=profile.pool_overhead_gib,
        graphs=GraphCosts(
            eager_setup_gib=profile.eager_setup_gib,
            eager_setup_gib_per_bs=profile.eager_setup_gib_per_bs,
            state_gib_per_bs=profile.graph_state_gib_per_bs,
            target_gib_per_token=profile.target_graph_gib_per_token,
            draft_gib_per_token=profile.draft_graph_gib_per_token,
            gib_per_graph=profile.graph_gib_per_graph,
            target_prefill_gib=profile.target_prefill_graph_gib,
            draft_prefill_gib=profile.draft_prefill_graph_gib,
            prefill_min_free_gib=profile.prefill_graph_min_free_gib,
        ),
        # The simulated node's own figures (the simulator walks the same account: a test checks they
        # agree), so only rounding is left to the margin.
        graph_margin_gib=0.02,
        graph_margin_rel=0.01,
        serving=simulated_costs(profile.serving_gib_per_token),
        source=f"simulated profile {profile.name}",
    )


def load_shapes(target_dir: str, draft_dir: str | None) -> tuple[ModelShape, ModelShape | None]:
    """Both shapes; ShapeError (naming the file and field) when one cannot be used."""
    return load_shape(target_dir), load_shape(draft_dir) if draft_dir else None


def driver_gpu_memory_mib() -> float | None:
    """The smallest GPU's total memory as the driver's NVML sees it; None without GPUs or NVML."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            count = pynvml.nvmlDeviceGetCount()
            totals = [
                pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(i)).total / 2**20
                for i in range(count)
            ]
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        return None
    return min(totals) if totals else None


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
    ) -> None:
        super().__init__(tp=tp, kv_heads=kv_heads)
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
            target, draft = self._shapes
            self.facts = _shaped_facts(
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
        graph_oom = result.failure is not None and result.failure.stage in (
            FailureStage.TARGET_GRAPH_CAPTURE,
            FailureStage.DRAFT_GRAPH_CAPTURE,
        )
        if started(result) and m.avail_end_gb is not None:
            ratio = (m.avail_after_kv_gb - m.avail_end_gb - late) / raw.graph_gb
            if ratio <= 0:
                # More free at the end than after the pools: the allocator gave back its cache before
                # the captures (0.8 GiB on the H200's 8B shape), so these figures measure no graph.
                return
            self.graph_scale = ratio if self.graph_scale is None else max(self.graph_scale, ratio)
        elif result.status is TrialStatus.OOM and graph_oom:
            # What was free was not enough: the graphs need more than that.
            at_least = (m.avail_after_kv_gb - late + 0.01) / raw.graph_gb
            self.graph_scale = max(self.graph_scale or 1.0, at_least)

    # -- predicting ----------------------------------------------------------------------------------

    def left_after_start(self, config: ServerConfig) -> float | None:
        """GiB free once start-up is done: the prior's figure, moved by the least it erred by on any
        launch that started here (it credits none of what the allocator gives back before the captures:
        on the H200's 8B shape it predicts 1.8 GiB less than the logs show); None without facts."""
        facts = self.scaled_facts
        if facts is None:
            return None
        left = left_after_start(facts, config)
        if self._started:
            left += min(end - left_after_start(facts, ref) for ref, end in self._started)
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
            f"{config.mem_fraction_static:.3f}"
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
                f"pool at fraction {f:.3f} (minimum viable {est.floor_fraction:.4f})"
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
        if est.graph_gb + margin > est.room_gb:
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
                f"{est.room_gb:.2f} GiB left{late} at fraction {f:.3f} (ceiling {est.ceiling_fraction:.3f})"
            )
            return Prediction(
                False, True, stage, float(est.kv_tokens), est.room_gb, est.graph_gb, reason, from_prior=True
            )
        return self._serving_refusal(config, est) or base


def from_prior(prediction: Prediction) -> bool:
    """Whether the prior (not a learned bound) refused the configuration: a known-good configuration
    is launched against the learned bounds (they may come from another node), not against the prior."""
    return prediction.from_prior


def _shaped_facts(
    target: ModelShape,
    draft: ModelShape | None,
    total_mib: float,
    tp: int,
    version: str,
    prefill: bool,
    kv_dtype_bytes: float | None = None,
) -> MemoryFacts:
    facts = facts_from_shapes(target, draft, total_mib, tp, version, kv_dtype_bytes)
    return facts if prefill else without_prefill_graphs(facts)


def prefill_disabled(flags: Sequence[str]) -> bool:
    """Whether fixed server flags turn the prefill CUDA graphs off."""
    return flag_value(flags, "--cuda-graph-backend-prefill") == "disabled" or "--disable-cuda-graph" in flags


def kv_dtype_bytes_from_flags(flags: Sequence[str]) -> float | None:
    """``--kv-cache-dtype fp8_*`` halves the KV bytes of a 16-bit model; None: the model's dtype."""
    return 1.0 if (flag_value(flags, "--kv-cache-dtype") or "").startswith("fp8") else None


def memory_model_for(
    spec: SweepSpec, sim_profile: dict[str, Any] | None
) -> tuple[PriorMemoryModel, list[str]]:
    """The memory model of a sweep of ``spec``: the prior's facts from the simulated node's profile
    (which stands for its models' config.json and its GPUs; an in-process sweep, as the benchmarks run,
    passes none: the spec names it), or from the models' config.json on a real node."""
    source = sim_profile if sim_profile is not None else spec.simulated.profile if spec.simulated else None
    simulated = spec.backend is Backend.SIMULATED and source is not None
    profile = load_profile(source) if simulated and source is not None else None
    return build_memory_model(
        spec.node.gpus,
        kv_heads_of(spec.model.path),
        use_prior=spec.memory.prior,
        profile=profile,
        target_dir=spec.model.path,
        draft_dir=spec.model.draft_path,
        gpu_memory_mib=spec.memory.gpu_memory_mib,
        sglang_version=profile.sglang_version if profile else "0.5.17",
        prefill_graphs=not prefill_disabled(spec.server.flags),
        workload=(spec.workload.input_len, spec.workload.output_len),
        kv_dtype_bytes=kv_dtype_bytes_from_flags(spec.server.flags),
        serving=serving_workload_of(spec, profile),
    )


def serving_workload_of(spec: SweepSpec, profile: SimProfile | None) -> ServingWorkload:
    """The load the forwards must fit: the workload's highest concurrency and prompt length, with the
    chunked prefill size of the server's flags, else the simulated node's, else SGLang's default."""
    chunk = flag_value(spec.server.flags, "--chunked-prefill-size")
    size = int(chunk) if chunk is not None and chunk.lstrip("-").isdigit() and int(chunk) > 0 else None
    if size is None and profile is not None:
        size = profile.chunked_prefill_size
    return ServingWorkload(max(spec.workload.concurrency), spec.workload.input_len, size)


def build_memory_model(
    tp: int,
    kv_heads: int | None,
    *,
    use_prior: bool,
    profile: SimProfile | None,
    target_dir: str,
    draft_dir: str | None,
    gpu_memory_mib: float | None,
    sglang_version: str = "0.5.17",
    prefill_graphs: bool = True,
    workload: tuple[int, int] | None = None,
    kv_dtype_bytes: float | None = None,
    serving: ServingWorkload | None = None,
) -> tuple[PriorMemoryModel, list[str]]:
    """The sweep's memory model and the warnings to show (a config.json the prior cannot use)."""
    if not use_prior:
        return PriorMemoryModel(tp, kv_heads), []
    if profile is not None:
        node = facts_from_profile(profile, tp)
        node = node if prefill_graphs else without_prefill_graphs(node)
        return PriorMemoryModel(tp, kv_heads, node, workload=workload, serving=serving), []
    try:
        shapes = load_shapes(target_dir, draft_dir)
    except ShapeError as err:
        return PriorMemoryModel(tp, kv_heads), [
            f"warning: memory prior off, learning from launches only: {err}",
        ]
    total = gpu_memory_mib or driver_gpu_memory_mib()
    shaped: MemoryFacts | None = None  # None: the first launch's GPU check tells the GPU's memory
    if total is not None:
        shaped = _shaped_facts(
            shapes[0], shapes[1], total, tp, sglang_version, prefill_graphs, kv_dtype_bytes
        )
    model = PriorMemoryModel(
        tp, kv_heads, shaped, shapes, sglang_version, prefill_graphs, workload, kv_dtype_bytes, serving
    )
    return model, []
