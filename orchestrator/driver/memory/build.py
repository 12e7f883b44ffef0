"""A sweep's memory model: `PriorMemoryModel` over the node's facts (`node_facts`: a simulated node's
profile, a `SimulatedNodeMemory`, or the models' config.json), or the learned model alone when the prior
is off or cannot read the models' config.json (a warning says which file and field). The spec's side,
which loads a simulated node's profile, is `driver.loop.node_memory.memory_model_for`."""

from __future__ import annotations

from orchestrator.driver.memory.facts import MemoryFacts, without_prefill_graphs
from orchestrator.driver.memory.node_facts import (
    driver_gpu_memory_mib,
    facts_from_profile,
    load_shapes,
    shaped_facts,
)
from orchestrator.driver.memory.node_profile import SimulatedNodeMemory
from orchestrator.driver.memory.prior_model import PriorMemoryModel
from orchestrator.driver.memory.serving import ServingWorkload
from orchestrator.engines import engine_for
from orchestrator.footprint.shape import ShapeError
from orchestrator.spec.sweep_spec import SweepSpec


def prior_applies(spec: SweepSpec) -> bool:
    """The spec asks for the prior and its engine's space has the defaults the prior is fitted on
    (SGLang's graph and scheduler constants, its memory account); another engine is searched from its
    launches alone."""
    return spec.memory.prior and engine_for(spec.engine).space.memory_defaults


def serving_workload_of(spec: SweepSpec, profile: SimulatedNodeMemory | None) -> ServingWorkload:
    """The load the forwards must fit: the workload's highest concurrency and prompt length, with the
    chunked prefill size of the server's flags, else the simulated node's, else SGLang's default."""
    size = spec.server_facts.chunked_prefill_size
    if size is None and profile is not None:
        size = profile.chunked_prefill_size
    return ServingWorkload(max(spec.workload.concurrency), spec.workload.input_len, size)


def build_memory_model(
    tp: int,
    kv_heads: int | None,
    *,
    use_prior: bool,
    profile: SimulatedNodeMemory | None,
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
    source = "memory.gpu_memory_mib" if gpu_memory_mib else None
    model = PriorMemoryModel(
        tp,
        kv_heads,
        shaped,
        shapes,
        sglang_version,
        prefill_graphs,
        workload,
        kv_dtype_bytes,
        serving,
        source,
    )
    return model, []
