"""What the end-to-end tests share: the demo's configurations and a Ray cluster of simulated nodes."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil
import ray
from ray.cluster_utils import Cluster

from orchestrator.driver.dispatch.placement import TRIAL_SLOT
from orchestrator.driver.dispatch.stale_servers import LaunchedServers
from orchestrator.trial_events import ServerId
from tests.browser import HEADLESS, chromium, require_chromium

__all__ = ["HEADLESS", "chromium", "require_chromium"]  # the browser tests of this folder take them from here
ROOT = Path(__file__).resolve().parents[2]

# The users' known-good configuration, with graph bs 128, and one that cannot hold Kimi's weights.
GOOD = {
    "mem_fraction_static": 0.88,
    "cuda_graph_max_bs": 128,
    "max_running_requests": 48,
    "speculative_num_steps": 3,
    "speculative_eagle_topk": 1,
    "speculative_num_draft_tokens": 4,
}
KV_OOM = {**GOOD, "mem_fraction_static": 0.70}  # 0.70 x 94 GB cannot hold Kimi's 72 GB of weights


@contextmanager
def sim_cluster(nodes: int) -> Iterator[Cluster]:
    """A head with no GPU and `nodes` simulated 8-GPU nodes with one trial slot each, as in
    ray_cluster.yaml; the driver is connected for the duration."""
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "num_gpus": 0})
    for _ in range(nodes):
        c.add_node(num_cpus=2, num_gpus=8, resources={TRIAL_SLOT: 1})
    c.wait_for_nodes()
    ray.init(address=c.address, logging_level="WARNING", log_to_driver=False)
    try:
        yield c
    finally:
        ray.shutdown()
        c.shutdown()


def wait_until(predicate: Any, timeout: float, what: str) -> Any:
    """Poll `predicate` until it returns something truthy (returned), or fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def sweep(spec: Path, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    """`python -m orchestrator.sweep SPEC --out OUT` as a user runs it (no dashboard: faster)."""
    return subprocess.run(
        [sys.executable, "-m", "orchestrator.sweep", str(spec), "--out", str(out), "--no-dashboard", *extra],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )


def launched_servers(study_dir: Path) -> list[ServerId]:
    """The servers of the trials in flight, as the driver's journal records them (a trial's record is
    written as soon as its server starts, and removed when its result is back)."""
    folder = study_dir / "records" / "servers"
    return [s.server for s in LaunchedServers(folder).recorded()] if folder.is_dir() else []


def settled_numbers(study_dir: Path) -> list[int]:
    """The trials whose record the driver's journal holds (settled: finished, or answered without one)."""
    folder = study_dir / "records"
    return sorted(int(p.stem) for p in folder.glob("[0-9]*.json")) if folder.is_dir() else []


def in_flight_after_one_settled(study_dir: Path) -> list[ServerId]:
    """The servers running once a trial has settled and another one's server has started (the moment
    to interrupt a driver mid-trial), or [] until then."""
    return launched_servers(study_dir) if settled_numbers(study_dir) else []


def server_gone(server: ServerId) -> bool:
    """Ended (or a zombie), or its pid now names another process."""
    try:
        proc = psutil.Process(server.pid)
        return proc.status() == psutil.STATUS_ZOMBIE or abs(proc.create_time() - server.create_time) > 0.05
    except psutil.NoSuchProcess:
        return True


def servers_of(root: Path) -> list[psutil.Process]:
    """Simulated servers started for this test (their profile file lies under `root`)."""
    found = []
    for p in psutil.process_iter(["cmdline"]):
        cmd = " ".join(p.info["cmdline"] or [])
        if "orchestrator.sim.server" in cmd and str(root) in cmd:
            found.append(p)
    return found
