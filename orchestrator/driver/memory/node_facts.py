"""The prior's facts of a node (`facts.MemoryFacts`): where its figures come from.

On the simulated backend from the node's profile (a `SimulatedNodeMemory`, which names its models' config.json
where it has them, `sim.shape_memory`, and its GPU's memory as the fake NVML shows it); on real nodes from the
models' config.json read on the driver, and the GPU memory from ``memory.gpu_memory_mib``, else the driver's
own NVML, else the first launch's GPU check (a node's NVML reading travels back with every trial): the driver
often has no GPU, and the baseline launch, which runs first, is then the probe. A config.json that cannot be
read, or names a quantization or architecture the arithmetic does not know, is a `ShapeError` naming the file
and the field.
"""

from __future__ import annotations

from orchestrator.driver.memory.facts import (
    MemoryFacts,
    VersionRule,
    facts_from_shapes,
    without_prefill_graphs,
)
from orchestrator.driver.memory.node_profile import SimulatedNodeMemory
from orchestrator.driver.memory.serving import simulated_costs
from orchestrator.footprint.graph_costs import GraphCosts
from orchestrator.footprint.shape import ModelShape, kv_shards, load_shape


def facts_from_profile(profile: SimulatedNodeMemory, tp: int) -> MemoryFacts:
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
            # the simulator prices a draft decode step as one of its extend tokens (`sim.memory`)
            draft_step_gib_per_token=profile.draft_graph_gib_per_token,
            gib_per_graph=profile.graph_gib_per_graph,
            draft_gib_per_graph=profile.graph_gib_per_graph,
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


def shaped_facts(
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


def kv_dtype_bytes(kv_cache_dtype: str | None) -> float | None:
    """The spec's fixed ``--kv-cache-dtype`` (`FixedFlags.kv_cache_dtype`): an fp8 one halves the KV bytes
    of a 16-bit model; None: the model's dtype."""
    return 1.0 if (kv_cache_dtype or "").startswith("fp8") else None
