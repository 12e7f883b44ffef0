"""A sweep's memory model, built from its spec: `PriorMemoryModel` over the node's facts (`node_facts`), or
the learned model alone when the prior is off or cannot read the models' config.json (a warning says
which file and field)."""

from __future__ import annotations

from typing import Any

from orchestrator.driver.memory.learned import kv_heads_of
from orchestrator.driver.memory.node_facts import (
    driver_gpu_memory_mib,
    facts_from_profile,
    kv_dtype_bytes_from_flags,
    load_shapes,
    prefill_disabled,
    shaped_facts,
)
from orchestrator.driver.memory.prior import MemoryFacts, without_prefill_graphs
from orchestrator.driver.memory.prior_model import PriorMemoryModel
from orchestrator.driver.memory.serving import ServingWorkload
from orchestrator.footprint.shape import ShapeError
from orchestrator.secrets import flag_value
from orchestrator.sim.profile import SimProfile, load_profile
from orchestrator.spec.sweep_spec import Backend, SweepSpec


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
        shaped = shaped_facts(shapes[0], shapes[1], total, tp, sglang_version, prefill_graphs, kv_dtype_bytes)
    model = PriorMemoryModel(
        tp, kv_heads, shaped, shapes, sglang_version, prefill_graphs, workload, kv_dtype_bytes, serving
    )
    return model, []
