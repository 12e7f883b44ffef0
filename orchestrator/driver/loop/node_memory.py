"""A sweep's memory model, built from its spec: where the prior's facts come from.

On the simulated backend the node's own profile stands for its models' config.json and its GPUs; it is
loaded here, by the loop that wires the sweep, and handed to the memory room as a `SimulatedNodeMemory`,
so that the memory model never imports the simulator. On a real node the facts come from the models'
config.json (`driver.memory.build.build_memory_model`).
"""

from __future__ import annotations

from typing import Any

from orchestrator.driver.memory.build import build_memory_model, prior_applies, serving_workload_of
from orchestrator.driver.memory.learned import kv_heads_of
from orchestrator.driver.memory.node_facts import kv_dtype_bytes
from orchestrator.driver.memory.prior_model import PriorMemoryModel
from orchestrator.sim.profile import load_profile
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
        use_prior=prior_applies(spec),
        profile=profile,
        target_dir=spec.model.path,
        draft_dir=spec.model.draft_path,
        gpu_memory_mib=spec.memory.gpu_memory_mib,
        sglang_version=profile.sglang_version if profile else "0.5.17",
        prefill_graphs=spec.server_facts.prefill_graphs,
        workload=(spec.workload.input_len, spec.workload.output_len),
        kv_dtype_bytes=kv_dtype_bytes(spec.server_facts.kv_cache_dtype),
        serving=serving_workload_of(spec, profile),
    )
