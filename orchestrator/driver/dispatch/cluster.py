"""Ray: connect to a cluster or start the embedded one, and place one trial per whole node.

A trial asks for all the GPUs of a node plus the custom resource `trial_slot: 1` that every node
declares once, so nothing is ever packed beside it. Ray-level retries are off: the driver decides
what a lost node means. `RayExecutor` is the driver's `Executor` (`driver.dispatch.executor`) on Ray.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import ray

from orchestrator.driver.dispatch.executor import Handle
from orchestrator.driver.dispatch.placement import TRIAL_SLOT, pinned_to
from orchestrator.driver.dispatch.ray_metrics import record_to_ray
from orchestrator.driver.dispatch.trial_channel import EventFeed, phase_hook, stage_hook
from orchestrator.errors import TrialError, TrialLost
from orchestrator.node.trial import run_trial
from orchestrator.records import FailureStage, TrialResult
from orchestrator.spec.model_checks import model_folder_lacks_config
from orchestrator.spec.sweep_spec import Backend, NodeKind, SweepSpec
from orchestrator.trial_events import TrialEvent, TrialRequest

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ClusterInfo:
    address: str
    dashboard_url: str
    slots: int
    started_here: bool


def connect(
    spec: SweepSpec, address: str | None, *, dashboard: bool = True, temp_dir: str | None = None
) -> ClusterInfo:
    """Join `address`, or start a local Ray head that looks like one node of the spec (its sessions under
    `temp_dir`, when given, instead of Ray's default)."""
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
        if temp_dir:
            kwargs["_temp_dir"] = temp_dir
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


# Ray gives a function declared with GPUs a fresh worker per call (max_calls=1) so that frameworks release
# their CUDA memory. A trial holds no CUDA context itself (the server is its child), so its worker is
# reused and the imports are paid once per node; GPUs are asked for per call in `submit`.
@ray.remote(max_retries=0, max_calls=0)
def _trial_task(request: TrialRequest, channel: Any) -> TrialResult:
    # The node knows no Ray: its metrics reach the dashboard through the sink installed here, and its id
    # is the one Ray gives the node the task landed on.
    record_to_ray()
    node_id = str(ray.get_runtime_context().get_node_id())
    if channel is None:
        return run_trial(request, node_id=node_id)
    return run_trial(request, stage_hook(channel, request.number), phase_hook(channel), node_id=node_id)


def submit(request: TrialRequest, channel: Any, node_id: str | None = None) -> ray.ObjectRef:
    """Start a trial on a free node (the one the driver picked, when it picked one); the task's name shows
    its configuration and node in the dashboard. `channel` is the `TrialChannel` actor its phases and
    stages go to (None: the trial runs to the end unobserved)."""
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
    return _trial_task.options(**options).remote(request, channel)


@ray.remote(num_cpus=0, max_retries=0)
def _check_paths(paths: list[str]) -> list[str]:
    from pathlib import Path

    # A model folder SGLang cannot load names the file it lacks (config.json), not the folder.
    missing = [p for p in paths if not Path(p).exists()]
    return missing + [str(Path(p) / "config.json") for p in paths if model_folder_lacks_config(p)]


def preflight_paths(spec: SweepSpec) -> dict[str, list[str]]:
    """Model paths missing on each trial node, found with a zero-resource task per node: nothing is
    claimed, so a wrong path is reported before any GPU is."""
    if spec.node_kind is not NodeKind.REAL or not spec.model.check_paths:
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


def open_events() -> EventFeed:
    """The channel running trials report their phases and stages through; its actor is `specsweep` in
    the dashboard's Actors tab, and its log is the node health board."""
    return EventFeed()


class RayExecutor:
    """The driver's executor on a Ray cluster: a trial is a task on a whole node, its phases and stages
    come through the `TrialChannel` actor, and a trial whose worker or node died is `TrialLost`."""

    def __init__(self) -> None:
        self._events: EventFeed | None = None

    def open(self) -> None:
        record_to_ray()  # the driver's observers record the trials' metrics for the dashboard
        self._events = open_events()

    def _feed(self) -> EventFeed:
        if self._events is None:
            raise RuntimeError("RayExecutor.open() was not called")
        return self._events

    def trial_slots(self) -> int:
        return trial_slots()

    def alive_nodes(self) -> list[dict[str, Any]]:
        return alive_nodes()

    def submit(self, request: TrialRequest, node_id: str) -> Handle:
        return submit(request, self._feed().actor, node_id)

    def wait(self, handles: Sequence[Handle], timeout_s: float) -> tuple[list[Handle], list[TrialEvent]]:
        feed = self._feed()
        # The events' ref is waited on beside the trials': a stage report wakes the driver at once.
        ready, _ = ray.wait([*handles, feed.pending()], num_returns=1, timeout=timeout_s)
        events = feed.take(ready)
        running = set(handles)
        return [ref for ref in ready if ref in running], events

    def result(self, handle: Handle) -> TrialResult:
        try:
            result: TrialResult = ray.get(cast(ray.ObjectRef, handle))
        except ray.exceptions.RayTaskError as err:  # the task ran and raised: our bug, not the node
            # The node's `TrialError` comes back whole, with its fields, as the cause Ray pickled; what
            # raised outside `run_trial` (Ray unpickling the request) is classified by its type alone.
            cause = err.cause
            if isinstance(cause, TrialError):
                raise cause from err
            raise TrialError.from_exception(
                cause if isinstance(cause, BaseException) else err, FailureStage.LAUNCH
            ) from err
        except (ray.exceptions.RayError, OSError) as err:  # the worker or the node died under it
            raise TrialLost(_first_line(err)) from err
        return result

    def decide(self, number: int, step: int, keep_going: bool) -> None:
        self._feed().decide(number, step, keep_going)

    def node_health(self, lines: list[str]) -> None:
        self._feed().node_health(lines)

    def cancel(self, handle: Handle) -> None:
        ray.cancel(cast(ray.ObjectRef, handle), force=True)

    def close(self) -> None:
        if self._events is not None:
            self._events.close()
            self._events = None


def _first_line(err: BaseException) -> str:
    """What Ray says of a lost worker or node, on one line (its message goes on with the task's
    details)."""
    lines = str(err).strip().splitlines()
    return lines[0] if lines else type(err).__name__


def dashboard_login(ray_cli: str | None = None) -> str | None:
    """How to get past the dashboard's "Authentication Token Required" page, or None when token
    authentication is off. ``ray_cli``: the `ray` command as the console names its other tools (the
    one beside this interpreter, relative to the working folder); by default the one on PATH.

    The dashboard accepts the token the driver connected with: a new local instance uses (and, on first
    use, writes) ~/.ray/auth_token, unless RAY_AUTH_TOKEN or RAY_AUTH_TOKEN_PATH names another, and a
    cluster joined with `--ray-address` only lets this driver in with that cluster's token, found the same
    way. `ray get-auth-token` prints it, reading the same places in the same order.
    """
    try:
        from ray._private.authentication.authentication_utils import is_token_auth_enabled
    except ImportError:  # a Ray without token authentication
        return None
    if not is_token_auth_enabled():
        return None
    ray_cli = ray_cli or shutil.which("ray") or str(Path(sys.executable).with_name("ray"))
    if os.environ.get("RAY_AUTH_TOKEN"):
        where = "$RAY_AUTH_TOKEN"
    else:
        where = os.environ.get("RAY_AUTH_TOKEN_PATH") or str(Path.home() / ".ray" / "auth_token")
    return f"log in with the token in {where} (print it: {ray_cli} get-auth-token)"
