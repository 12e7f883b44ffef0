"""Ray: connect to a cluster or start the embedded one, and place one trial per whole node.

A trial asks for all the GPUs of a node plus the custom resource `trial_slot: 1` that every node
declares once, so nothing is ever packed beside it. Ray-level retries are off: the driver decides
what a lost node means.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from typing import Any

import ray

from orchestrator.health import pinned_to
from orchestrator.records import StageMetrics, TrialResult
from orchestrator.spec import Backend, SweepSpec
from orchestrator.trial import TrialRequest, run_trial

log = logging.getLogger(__name__)
TRIAL_SLOT = "trial_slot"


@dataclass(frozen=True)
class ClusterInfo:
    address: str
    dashboard_url: str
    slots: int
    started_here: bool


def connect(spec: SweepSpec, address: str | None, *, dashboard: bool = True) -> ClusterInfo:
    """Join `address`, or start a local Ray head that looks like one node of the spec."""
    if ray.is_initialized():
        ctx: Any = None
    elif address:
        ctx = ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False)
    else:
        kwargs: dict[str, Any] = {
            # "local" always starts a new instance, even when another Ray runs on this machine.
            "address": "local",
            "resources": {TRIAL_SLOT: 1},
            "include_dashboard": dashboard,
            "logging_level": logging.WARNING,
            "log_to_driver": False,
            "num_cpus": max(2, os.cpu_count() or 2),
        }
        if spec.backend is Backend.SIMULATED:
            # A laptop has no GPU: the embedded node declares the spec's GPUs so placement is the same
            # as on a real node, and the simulated server and its fake NVML stand in for them.
            kwargs["num_gpus"] = spec.node.gpus
        ctx = ray.init(**kwargs)
    dashboard_url = ""
    if ctx is not None and getattr(ctx, "dashboard_url", None):
        dashboard_url = f"http://{ctx.dashboard_url}"
    return ClusterInfo(
        address=address or "local",
        dashboard_url=dashboard_url,
        slots=trial_slots(),
        started_here=address is None and ctx is not None,
    )


def gpu_shortfall(spec: SweepSpec) -> str | None:
    """Why no node can take a trial of `spec.node.gpus` GPUs, or None when one can.

    Checked once before the first trial: without it a sweep on a machine with no GPU ran no trial and
    ended with "no configuration completed" and exit 0.
    """
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    if any(n.get("Resources", {}).get("GPU", 0) >= spec.node.gpus for n in alive_nodes()):
        return None
    seen = "; ".join(
        f"node {n.get('NodeID', '?')[:12]} ({n.get('NodeManagerAddress', '?')}): "
        f"{int(n.get('Resources', {}).get('GPU', 0))} GPU(s) seen by Ray"
        f"{'' if n.get('Resources', {}).get(TRIAL_SLOT) else ', no trial_slot'}"
        for n in nodes
    )
    return (
        f"a trial needs {spec.node.gpus} GPU(s) on one node, but no node with a trial slot has that many "
        f"({seen or 'no node is alive'}){_nvml_note()}; run on a GPU node, lower node.gpus, or use "
        "backend: simulated"
    )


def _nvml_note() -> str:
    """What NVML on this machine says, which tells a missing driver from a Ray misconfiguration."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            return f"; NVML on this machine sees {pynvml.nvmlDeviceGetCount()} GPU(s)"
        finally:
            pynvml.nvmlShutdown()
    except Exception as err:  # no driver, no library: that is the answer
        return f"; NVML on this machine: {type(err).__name__}: {err}".rstrip(": ")


def trial_slots() -> int:
    return int(ray.cluster_resources().get(TRIAL_SLOT, 0))


def alive_nodes() -> list[dict[str, Any]]:
    return [n for n in ray.nodes() if n.get("Alive") and n.get("Resources", {}).get(TRIAL_SLOT)]


@ray.remote
class StageBroker:
    """Carries benchmark stages from running trials to the driver, and its prune decisions back.

    Only the driver talks to Optuna, so a trial reports each stage here and waits briefly for the
    driver's verdict before spending time on the next one.
    """

    def __init__(self) -> None:
        self._reports: list[tuple[int, int, StageMetrics]] = []
        self._decisions: dict[tuple[int, int], bool] = {}

    def report(self, number: int, step: int, metrics: StageMetrics) -> None:
        self._reports.append((number, step, metrics))

    def take_reports(self) -> list[tuple[int, int, StageMetrics]]:
        out, self._reports = self._reports, []
        return out

    def decide(self, number: int, step: int, keep_going: bool) -> None:
        self._decisions[(number, step)] = keep_going

    def decision(self, number: int, step: int) -> bool | None:
        return self._decisions.get((number, step))


def _broker_hook(broker: Any, number: int, wait_s: float = 10.0) -> Any:
    def on_stage(step: int, metrics: StageMetrics) -> bool:
        ray.get(broker.report.remote(number, step, metrics))
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            verdict = ray.get(broker.decision.remote(number, step))
            if verdict is not None:
                return bool(verdict)
            time.sleep(0.05)
        return True  # no verdict in time: measuring more is the safe side

    return on_stage


# Ray gives a function declared with GPUs a fresh worker per call (max_calls=1) so that frameworks release
# their CUDA memory. A trial holds no CUDA context itself (the server is its child), so its worker is
# reused and the imports are paid once per node; GPUs are asked for per call in `submit`.
@ray.remote(max_retries=0, max_calls=0)
def _trial_task(request: TrialRequest, broker: Any) -> TrialResult:
    hook = _broker_hook(broker, request.number) if broker is not None else None
    return run_trial(request, hook)


def submit(request: TrialRequest, broker: Any, node_id: str | None = None) -> ray.ObjectRef:
    """Start a trial on a free node (the one the driver picked, when it picked one); the task's name shows
    its configuration and node in the dashboard."""
    spec = request.spec
    where = f" @{node_id[:8]}" if node_id else ""
    options: dict[str, Any] = {
        "num_gpus": spec.node.gpus,
        "resources": {TRIAL_SLOT: 1},
        "name": f"trial-{request.number} {request.config.label()}{where}",
        "max_retries": 0,
    }
    if node_id:
        options.update(pinned_to(node_id))
    return _trial_task.options(**options).remote(request, broker)


@ray.remote(num_cpus=0, max_retries=0)
def _check_paths(paths: list[str]) -> list[str]:
    from pathlib import Path

    return [p for p in paths if not Path(p).exists()]


def preflight_paths(spec: SweepSpec) -> dict[str, list[str]]:
    """Model paths missing on each trial node, found with a zero-resource task per node: nothing is
    claimed, so a wrong path is reported before any GPU is."""
    if spec.backend is not Backend.SGLANG or not spec.model.check_paths:
        return {}
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    paths = [spec.model.path, spec.model.draft_path]
    refs = {
        node["NodeID"]: _check_paths.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(node["NodeID"], soft=False)
        ).remote(paths)
        for node in alive_nodes()
    }
    missing = {node_id: ray.get(ref, timeout=120) for node_id, ref in refs.items()}
    return {node_id: gone for node_id, gone in missing.items() if gone}
