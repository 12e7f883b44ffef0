"""The dashboard's metrics in a real local Ray: what reaches the metrics agent, gauges kept alive past
its time-to-live, and silence (never an error) where no sink is installed or Ray is gone."""

from __future__ import annotations

import logging
import os
import socket
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
import ray

from orchestrator import dashboard_metrics
from orchestrator.driver.dispatch.ray_metrics import RayMetrics, record_to_ray
from orchestrator.records import GpuProcess, GpuSample, TrialStatus

CLEAN = (GpuSample(0, 143771.0, 0.0), GpuSample(1, 143771.0, 0.0))
REPORT_INTERVAL_ENV = "RAY_metrics_report_interval_ms"
DIRTY = (GpuSample(0, 143771.0, 70000.0, (GpuProcess(4242, 69000.0, "python -m sglang"),)), CLEAN[1])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def ray_local() -> Iterator[dict[str, Any]]:
    if ray.is_initialized():
        ray.shutdown()
    port = _free_port()
    # Export fast so the test reads the agent within a second or two. Through the environment, not
    # _system_config: the metrics agent reads it too, and derives its gauge TTL from it (2 s here).
    saved = os.environ.get(REPORT_INTERVAL_ENV)
    os.environ[REPORT_INTERVAL_ENV] = "200"
    try:
        ray.init(
            address="local",  # a new instance, never another Ray running on this machine
            num_cpus=1,
            include_dashboard=False,
            logging_level=logging.WARNING,
            log_to_driver=False,
            _metrics_export_port=port,
        )
        record_to_ray()  # as `RayExecutor.open` does on the driver
        yield {"node_id": ray.get_runtime_context().get_node_id(), "metrics_port": port}
    finally:
        ray.shutdown()
        if saved is None:
            os.environ.pop(REPORT_INTERVAL_ENV, None)
        else:
            os.environ[REPORT_INTERVAL_ENV] = saved


def _scrape(port: int) -> list[str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    return [ln for ln in text.splitlines() if ln.startswith("ray_specsweep_")]


def _wait_for(port: int, wanted: list[str], timeout_s: float = 30.0) -> list[str]:
    deadline = time.monotonic() + timeout_s
    lines: list[str] = []
    while time.monotonic() < deadline:
        lines = _scrape(port)
        if all(any(all(part in ln for part in w.split("|")) for ln in lines) for w in wanted):
            return lines
        time.sleep(0.3)
    raise AssertionError(f"metrics not exported: wanted {wanted}, got {lines}")


@ray.remote(num_cpus=0)
def _record_on_node(node_id: str, samples: tuple[GpuSample, ...], clean: bool) -> bool:
    record_to_ray()  # as the trial's task does before the trial runs
    dashboard_metrics.record_gpu_samples(node_id, samples, clean)
    dashboard_metrics.record_running(node_id, True)
    return True


@pytest.mark.slow  # starts a local Ray and waits on its metrics agent
def test_record_functions_reach_the_metrics_agent(ray_local: dict[str, Any]) -> None:
    node_id = ray_local["node_id"]
    assert ray.get(_record_on_node.remote(node_id, DIRTY, False))
    dashboard_metrics.record_trial_finished(TrialStatus.OOM)
    dashboard_metrics.record_trial_finished(TrialStatus.OOM)
    dashboard_metrics.record_best(1234.5)
    _wait_for(
        ray_local["metrics_port"],
        [
            f'ray_specsweep_gpu_memory_used_mib|node_id="{node_id}"|gpu="0"| 70000.0',
            f'ray_specsweep_gpu_clean|node_id="{node_id}"| 0.0',
            f'ray_specsweep_trial_running|node_id="{node_id}"| 1.0',
            'ray_specsweep_trial_status_total|status="oom"| 2.0',
            "ray_specsweep_best_output_tok_per_s| 1234.5",
        ],
    )


@pytest.mark.slow  # starts a local Ray and waits on its metrics agent
def test_gauges_outlive_the_agents_ttl(ray_local: dict[str, Any]) -> None:
    # With a 200 ms report interval the agent drops a gauge not set for 2 s; the refresher keeps it.
    dashboard_metrics.record_best(777.0)
    _wait_for(ray_local["metrics_port"], ["ray_specsweep_best_output_tok_per_s| 777.0"])
    time.sleep(3.0)
    _wait_for(ray_local["metrics_port"], ["ray_specsweep_best_output_tok_per_s| 777.0"], timeout_s=1.0)


def _this_process_with(monkeypatch: pytest.MonkeyPatch, sink: object, ray_connected: bool) -> None:
    """The module's state as a fresh process with ``sink`` installed (None: none), Ray connected or not."""
    monkeypatch.setattr(ray, "is_initialized", lambda: ray_connected)
    monkeypatch.setattr(dashboard_metrics, "_sink", sink)
    monkeypatch.setattr(dashboard_metrics, "_refresher", None)
    monkeypatch.setattr(dashboard_metrics, "_last", {})
    monkeypatch.setattr(dashboard_metrics, "_refresh_forever", lambda: None)  # no thread left behind


def _record_everything() -> None:
    dashboard_metrics.record_gpu_samples("n", CLEAN, True)
    dashboard_metrics.record_trial_finished(TrialStatus.OK)
    dashboard_metrics.record_running("n", False)
    dashboard_metrics.record_best(1.0)
    dashboard_metrics.refresh()


def test_record_functions_are_silent_without_a_sink(monkeypatch: pytest.MonkeyPatch) -> None:
    """A process that runs trials in process (the trial tests, the search benchmark) installs no sink:
    nothing is kept or started for an agent, even with Ray connected."""
    _this_process_with(monkeypatch, None, ray_connected=True)
    _record_everything()
    assert dashboard_metrics._refresher is None and dashboard_metrics._last == {}


def test_rays_sink_is_silent_once_ray_is_gone(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ray's sink, installed while Ray ran, registers nothing after Ray shut down (a metric made without a
    connection would start a Ray of its own)."""
    sink = RayMetrics()
    _this_process_with(monkeypatch, sink, ray_connected=False)
    _record_everything()
    assert dashboard_metrics._refresher is None and dashboard_metrics._last == {}
    assert sink._gauges == {} and sink._counters == {}


class _Kept:
    """A sink that keeps what it is told."""

    def __init__(self) -> None:
        self.gauges: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
        self.counts: list[tuple[str, float, dict[str, str]]] = []

    def live(self) -> bool:
        return True

    def set_gauge(self, name: str, value: float, tags: dict[str, str] | None) -> None:
        self.gauges[(name, tuple(sorted((tags or {}).items())))] = value

    def count(self, name: str, value: float, tags: dict[str, str]) -> None:
        self.counts.append((name, value, tags))


def test_the_installed_sink_hears_every_record_and_keeps_its_place(monkeypatch: pytest.MonkeyPatch) -> None:
    kept = _Kept()
    _this_process_with(monkeypatch, None, ray_connected=False)  # the sink alone says whether it is live
    dashboard_metrics.install(kept)
    dashboard_metrics.install(_Kept())  # a second install (a task run again in its worker) changes nothing
    dashboard_metrics.record_gpu_samples("n", DIRTY, False)
    dashboard_metrics.record_trial_finished(TrialStatus.OOM)
    dashboard_metrics.record_running("n", True)
    dashboard_metrics.record_best(12.5)
    assert kept.gauges == {
        (dashboard_metrics.GPU_MEMORY_USED, (("gpu", "0"), ("node_id", "n"))): 70000.0,
        (dashboard_metrics.GPU_MEMORY_USED, (("gpu", "1"), ("node_id", "n"))): 0.0,
        (dashboard_metrics.GPU_CLEAN, (("node_id", "n"),)): 0.0,
        (dashboard_metrics.TRIAL_RUNNING, (("node_id", "n"),)): 1.0,
        (dashboard_metrics.BEST_TOK_S, ()): 12.5,
    }
    assert kept.counts == [(dashboard_metrics.TRIAL_STATUS, 1.0, {"status": "oom"})]
    # The refresher sets each gauge again from what was last recorded.
    kept.gauges.clear()
    dashboard_metrics.refresh()
    assert kept.gauges[(dashboard_metrics.BEST_TOK_S, ())] == 12.5 and len(kept.gauges) == 5


def test_record_functions_never_raise(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken() -> None:
        raise RuntimeError("metrics agent gone")

    monkeypatch.setattr(dashboard_metrics, "_ensure", broken)
    monkeypatch.setattr(dashboard_metrics, "_last", {})
    dashboard_metrics.record_gpu_samples("n", CLEAN, True)
    dashboard_metrics.record_trial_finished(TrialStatus.OK)
    dashboard_metrics.record_running("n", False)
    dashboard_metrics.record_best(1.0)
    assert dashboard_metrics._last == {}  # nothing half-recorded before the failure
