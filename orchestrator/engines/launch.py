"""A trial's launch plan: the spec's engine renders its flags after the module the node runs.

A real node runs the engine's own module (`Engine.launch_module`); the simulated node runs the simulated
SGLang server with the same flags and its own (`SIM_FLAG_PREFIX`) after them.
"""

from __future__ import annotations

import sys

from orchestrator import adaptive
from orchestrator.engines import engine_for
from orchestrator.engines.sglang.command import SIM_FLAG_PREFIX, LaunchPlan
from orchestrator.records import ServerConfig
from orchestrator.spec import NodeKind, SweepSpec

SIM_SERVER_MODULE = "orchestrator.sim.server"


def launch_plan(
    spec: SweepSpec,
    config: ServerConfig,
    *,
    version: str,
    port: int,
    tp_size: int,
    sim_profile_path: str = "",
    sim_state_dir: str = "",
    adaptive_config_path: str = adaptive.CONFIG_FILE,
) -> LaunchPlan:
    engine = engine_for(spec.engine)
    python = spec.server.python or sys.executable
    flags = engine.flags(
        spec, config, version=version, port=port, tp_size=tp_size, adaptive_config_path=adaptive_config_path
    )
    if spec.node_kind is NodeKind.REAL:
        argv = [python, "-m", engine.launch_module, *flags]
    else:
        sim_flags = [
            f"{SIM_FLAG_PREFIX}profile",
            sim_profile_path,
            f"{SIM_FLAG_PREFIX}state-dir",
            sim_state_dir,
        ]
        argv = [python, "-m", SIM_SERVER_MODULE, *flags, *sim_flags]
    return LaunchPlan(
        argv=tuple(argv),
        host=spec.server.host,
        port=port,
        env=tuple(sorted(spec.server.env.items())),
        secret_flags=tuple(spec.server.secret_flags),
    )
