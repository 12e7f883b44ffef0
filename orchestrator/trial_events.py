"""The wire between the driver and its trials: what the driver sends a trial (`TrialRequest`), and what a
running trial tells the driver while it runs: its phase, and each benchmark stage (answered by the
driver's prune verdict).

Plain frozen records, built on one side and read on the other; they travel through
`driver.dispatch.trial_channel` (the Ray actor). Importing this module loads no Ray, so the driver's
`Executor` seam can name them without it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from orchestrator.records import FailureStage, ServerConfig, StageMetrics
from orchestrator.spec.sweep_spec import SweepSpec


class Phase(StrEnum):
    """What a running trial is doing, in the order a trial goes through them."""

    GPU_CHECK = "checking GPUs"
    LAUNCH = "starting the server"
    LOADING_WEIGHTS = "loading weights"
    KV_ALLOCATION = "allocating the KV cache"
    DRAFT_MODEL = "loading the draft model"  # SGLang 0.5.14 on; 0.5.9 loads it after the target's graphs
    CUDA_GRAPHS = "capturing CUDA graphs"
    DRAFT_CUDA_GRAPHS = "capturing draft CUDA graphs"
    WARMUP = "warming up"
    KV_PROBE = "KV probe"
    BENCHMARK = "benchmarking"
    STOPPING = "stopping"


# Start-up phases as the server's log reveals them (the log parser's stage names).
_STARTUP_PHASES = {
    FailureStage.LAUNCH: Phase.LAUNCH,
    FailureStage.WEIGHT_LOADING: Phase.LOADING_WEIGHTS,
    FailureStage.KV_ALLOCATION: Phase.KV_ALLOCATION,
    FailureStage.TARGET_GRAPH_CAPTURE: Phase.CUDA_GRAPHS,
    FailureStage.DRAFT_GRAPH_CAPTURE: Phase.DRAFT_CUDA_GRAPHS,
    FailureStage.WARMUP: Phase.WARMUP,
}


# Where a trial was, as a failure's stage: the node's own code raising in a phase is recorded there.
_FAILURE_STAGES = {
    Phase.GPU_CHECK: FailureStage.GPU_CHECK,
    Phase.LAUNCH: FailureStage.LAUNCH,
    Phase.LOADING_WEIGHTS: FailureStage.WEIGHT_LOADING,
    Phase.KV_ALLOCATION: FailureStage.KV_ALLOCATION,
    Phase.CUDA_GRAPHS: FailureStage.TARGET_GRAPH_CAPTURE,
    Phase.DRAFT_MODEL: FailureStage.WEIGHT_LOADING,
    Phase.DRAFT_CUDA_GRAPHS: FailureStage.DRAFT_GRAPH_CAPTURE,
    Phase.WARMUP: FailureStage.WARMUP,
    Phase.KV_PROBE: FailureStage.UNDER_LOAD,
    Phase.BENCHMARK: FailureStage.UNDER_LOAD,
    Phase.STOPPING: FailureStage.SHUTDOWN,
}


def failure_stage(phase: Phase | None) -> FailureStage:
    """The failure stage of a trial that stopped in `phase` (None: before its first phase, making its
    folder: the launch)."""
    return FailureStage.LAUNCH if phase is None else _FAILURE_STAGES[phase]


def startup_phase(stage: FailureStage, current: Phase | None) -> Phase:
    """The phase a starting server is in, from the last stage its log shows. Weights loaded once the
    target's have been (0.5.14 on: right after them, before any graph; 0.5.9: after the target's CUDA
    graphs) are the draft's, and so is a KV cache allocated while the draft loads."""
    phase = _STARTUP_PHASES.get(stage, Phase.LAUNCH)
    if phase is Phase.LOADING_WEIGHTS and current in (Phase.KV_ALLOCATION, Phase.CUDA_GRAPHS):
        return Phase.DRAFT_MODEL
    if phase in (Phase.LOADING_WEIGHTS, Phase.KV_ALLOCATION) and current is Phase.DRAFT_MODEL:
        return Phase.DRAFT_MODEL
    return phase


@dataclass(frozen=True)
class ServerId:
    """A launched server as the driver's journal records it: a pid names a process only together with
    its create time (pids are reused), and only on its host."""

    pid: int
    create_time: float
    host: str


@dataclass(frozen=True)
class PhaseEvent:
    """A trial entered `phase`; `step` of `steps` while benchmarking. From the launch on, every event
    names the trial's server, so that the driver records it even if one event is lost."""

    number: int
    phase: Phase
    started_unix: float  # when the trial started
    at_unix: float  # when it entered this phase
    node_id: str = ""
    step: int | None = None
    steps: int | None = None
    server: ServerId | None = None
    machine: str = ""  # the GPUs' UUIDs once the GPU check has read them (`records.machine_of`)

    def describe(self) -> str:
        if self.step is not None and self.steps is not None:
            return f"{self.phase.value} stage {self.step + 1} of {self.steps}"
        return self.phase.value


@dataclass(frozen=True)
class StageReport:
    number: int
    step: int
    metrics: StageMetrics
    at_unix: float


TrialEvent = PhaseEvent | StageReport
PhaseHook = Callable[[PhaseEvent], None]


@dataclass(frozen=True)
class TrialRequest:
    """What the driver sends a node to run one trial."""

    spec: SweepSpec
    config: ServerConfig
    number: int
    workdir: str
    sim_profile: dict[str, Any] | None = None
