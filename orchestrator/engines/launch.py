"""A trial's command line, rendered once: the spec's engine renders its flags after the module the node runs.

`command_argv` is the one rendering of a configuration's command, from structured data (an
`engines.engine.TrialLaunch`: the configuration, its `engines.engine.LaunchSettings`, the version, port and
tensor-parallel size): the launch plan, the answer's best_command.sh and a command read
back from an MLflow run all take it, and none reads a command line back. A real node runs the engine's own
module (`Engine.launch_module`); the simulated node runs the simulated SGLang server with the same flags and
its own (`SIM_FLAG_PREFIX`) after them.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass

from orchestrator.config import adaptive
from orchestrator.engines import engine_for
from orchestrator.engines.engine import LaunchSettings, TrialLaunch
from orchestrator.records import ServerConfig
from orchestrator.secrets import mask_argv
from orchestrator.spec.sweep_spec import NodeKind, SweepSpec

SIM_SERVER_MODULE = "orchestrator.sim.server"
# The simulated server's own flags start so; no engine has a setting named so (SGLang has none).
SIM_FLAG_PREFIX = "--sim-"


@dataclass(frozen=True)
class LaunchPlan:
    """What a trial starts: the argument list (never a shell string) and where it listens."""

    argv: tuple[str, ...]
    host: str
    port: int
    env: tuple[tuple[str, str], ...] = ()
    secret_flags: tuple[str, ...] = ()  # the spec's own, beyond SGLang's credential flags

    @property
    def base_url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host
        return f"http://{host}:{self.port}"

    def masked_argv(self) -> tuple[str, ...]:
        return mask_argv(self.argv, self.secret_flags)


def command_argv(launch: TrialLaunch, sim_flags: Sequence[str] | None = None) -> tuple[str, ...]:
    """The command that serves ``launch``: the engine's module and flags (with ``sim_flags``, the simulated
    server's module, those flags and then its own), unmasked."""
    engine = engine_for(launch.settings.engine)
    python = launch.settings.python or sys.executable
    flags = engine.flags(launch)
    if sim_flags is None:
        return (python, "-m", engine.launch_module, *flags)
    return (python, "-m", SIM_SERVER_MODULE, *flags, *sim_flags)


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
    sim_flags = None
    if spec.node_kind is not NodeKind.REAL:
        sim_flags = [
            f"{SIM_FLAG_PREFIX}profile",
            sim_profile_path,
            f"{SIM_FLAG_PREFIX}state-dir",
            sim_state_dir,
        ]
    launch = TrialLaunch(LaunchSettings.from_spec(spec), config, version, port, tp_size, adaptive_config_path)
    argv = command_argv(launch, sim_flags)
    return LaunchPlan(
        argv=argv,
        host=spec.server.host,
        port=port,
        env=tuple(sorted(spec.server.env.items())),
        secret_flags=tuple(spec.server.secret_flags),
    )
