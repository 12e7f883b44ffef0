"""What a trial needs to know about the node it runs on, per node kind.

`RealNode` drives the spec's engine on real GPUs and reads the real NVML; `SimulatedNode` starts the
simulated SGLang server with the same flags and reads its fake NVML. Everything else in a trial is shared.
"""

from __future__ import annotations

import json
import logging
import os
import random
import socket
import tempfile
from pathlib import Path
from typing import Any, Protocol

from orchestrator.config import adaptive
from orchestrator.engines import engine_for
from orchestrator.engines.engine import Engine
from orchestrator.engines.launch import LaunchPlan, launch_plan
from orchestrator.gpu import GpuProbe, NvmlProbe, visible_indices
from orchestrator.records import ServerConfig
from orchestrator.spec.sweep_spec import NodeKind, SweepSpec

log = logging.getLogger(__name__)


class NodeBackend(Protocol):
    node_id: str

    def version(self) -> str: ...
    def probe(self) -> GpuProbe: ...
    def plan(self, config: ServerConfig, port: int, workdir: Path) -> LaunchPlan: ...
    def missing_paths(self) -> list[str]: ...


def free_port(host: str, start: int | None = None, attempts: int = 200) -> int:
    """A port nobody listens on, checked before launch: SGLang 0.5.17 finds a taken port only after its
    whole start-up and then hangs holding the GPU memory. The search starts at a random point so that
    two sweeps (or simulated nodes) on one host rarely race for the same port."""
    if start is None:
        start = 30000 + random.randrange(0, 20000)
    for port in range(start, start + attempts):
        if port_is_free(host, port):
            return port
    with socket.socket() as s:  # fall back to one the kernel picks
        s.bind((host, 0))
        return int(s.getsockname()[1])


def port_is_free(host: str, port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


class _LaunchingNode:
    """How every node kind plans a trial's launch: tensor-parallel over all the node's GPUs, with the
    adaptive speculation tiers written into the trial's own folder. A kind differs only in its version
    and in what a simulated server is told of its profile and GPU state (`_sim_paths`)."""

    spec: SweepSpec

    def version(self) -> str:
        raise NotImplementedError

    def _sim_paths(self, workdir: Path) -> tuple[str, str]:
        """The simulated server's profile file and GPU state folder; none for a real server."""
        return "", ""

    def plan(self, config: ServerConfig, port: int, workdir: Path) -> LaunchPlan:
        version = self.version()
        profile_path, state_dir = self._sim_paths(workdir)
        return launch_plan(
            self.spec,
            config,
            version=version,
            port=port,
            tp_size=self.spec.node.gpus,
            sim_profile_path=profile_path,
            sim_state_dir=state_dir,
            adaptive_config_path=adaptive.write_config(config, workdir),
        )


class RealNode(_LaunchingNode):
    """The spec's engine on this node's real GPUs."""

    def __init__(self, spec: SweepSpec, node_id: str, engine: Engine | None = None) -> None:
        self.spec = spec
        self.node_id = node_id
        self.engine = engine if engine is not None else engine_for(spec.engine)

    def version(self) -> str:
        return self.engine.installed_version(self.spec.server.python)

    def probe(self) -> GpuProbe:
        return NvmlProbe(visible_indices(self.spec.node.gpus)[: self.spec.node.gpus])

    def missing_paths(self) -> list[str]:
        if not self.spec.model.check_paths:
            return []
        return [p for p in (self.spec.model.path, self.spec.model.draft_path) if not Path(p).exists()]


def sim_state_dir(node_id: str) -> Path:
    """The folder where simulated node ``node_id`` keeps its GPUs' state, on that node's machine. The
    nodes of one machine keep theirs side by side: each also counts a sibling's server once its starter
    is gone (`sim.nvml`), as every node of the machine would see a stale process on its GPUs."""
    return Path(tempfile.gettempdir()) / "specsweep-sim" / node_id


class SimulatedNode(_LaunchingNode):
    """A simulated node: its GPUs live in a state folder that only its own server processes write."""

    def __init__(self, spec: SweepSpec, node_id: str, profile: dict[str, Any]) -> None:
        self.spec = spec
        self.node_id = node_id
        self.profile = profile
        self.state_dir = sim_state_dir(node_id)
        self.state_dir.mkdir(parents=True, exist_ok=True)

    def version(self) -> str:
        return str(self.profile.get("sglang_version", "0.5.17"))

    def probe(self) -> GpuProbe:
        from orchestrator.sim.nvml import FakeNvml

        return FakeNvml.for_profile(self.state_dir, self.profile)

    def _sim_paths(self, workdir: Path) -> tuple[str, str]:
        profile_path = workdir / "sim-profile.json"
        profile_path.write_text(json.dumps(self.profile))
        return str(profile_path), str(self.state_dir)

    def missing_paths(self) -> list[str]:
        return []  # the simulated node reads no weights

    def server_pids(self) -> set[int]:
        """The processes holding memory on this node's simulated GPUs (what nvidia-smi would list)."""
        return {p.pid for sample in self.probe().snapshot() for p in sample.processes}


def launch_profile(spec: SweepSpec, profile: dict[str, Any] | None, number: int) -> dict[str, Any] | None:
    """The simulated profile of one launch: each trial draws its own launch noise, as each start of a
    real server does, from the spec's seed and the trial number (the same sweep is the same again)."""
    if profile is None:
        return None
    base = spec.simulated.seed if spec.simulated is not None else 0
    return {**profile, "launch_seed": base * 1_000_003 + number}


def make_node(spec: SweepSpec, node_id: str, profile: dict[str, Any] | None) -> NodeBackend:
    if spec.node_kind is NodeKind.REAL:
        return RealNode(spec, node_id)
    assert profile is not None, "the driver resolves the simulated profile"
    return SimulatedNode(spec, node_id, profile)


def local_node_id() -> str:
    """The node's name where no scheduler gave one (the tests, a trial run by hand, the benchmarks): this
    process's. On Ray the trial's task passes the node's own id (`driver.dispatch.cluster`)."""
    return f"local-{os.getpid()}"
