"""Node health: quarantine bookkeeping, node choice, and the metrics in a real local Ray."""

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

from orchestrator import health
from orchestrator.health import NodeHealth, pick_node, pinned_to
from orchestrator.records import (
    Failure,
    FailureKind,
    FailureStage,
    GpuProcess,
    GpuSample,
    ServerConfig,
    TrialResult,
    TrialStatus,
)

CONFIG = ServerConfig(0.8, 256, 256, 3, 1, 4)
CLEAN = (GpuSample(0, 143771.0, 0.0), GpuSample(1, 143771.0, 0.0))
REPORT_INTERVAL_ENV = "RAY_metrics_report_interval_ms"
DIRTY = (GpuSample(0, 143771.0, 70000.0, (GpuProcess(4242, 69000.0, "python -m sglang"),)), CLEAN[1])


def _result(
    node: str, kind: FailureKind | None = None, gpu_before: tuple[GpuSample, ...] = CLEAN
) -> TrialResult:
    failure = None
    status = TrialStatus.OK
    if kind is not None:
        stage = FailureStage.GPU_CHECK if kind is FailureKind.GPU_NOT_CLEAN else FailureStage.UNDER_LOAD
        failure = Failure(stage, kind, f"{kind.value} on {node}")
        status = TrialStatus.FAILED
    return TrialResult(CONFIG, status, node, (), failure=failure, gpu_before=gpu_before)


def _dirty(node: str) -> TrialResult:
    return _result(node, FailureKind.GPU_NOT_CLEAN, gpu_before=DIRTY)


# -- NodeHealth ------------------------------------------------------------------------------------


def test_two_hygiene_failures_in_a_row_quarantine_the_node() -> None:
    h = NodeHealth()
    assert h.observe(_dirty("a")) is False
    assert not h.quarantined("a")
    assert h.observe(_dirty("a")) is True
    assert h.quarantined("a")
    assert h.quarantined_nodes == frozenset({"a"})
    assert h.observe(_dirty("a")) is False  # already in quarantine: reported once
    assert not h.quarantined("b")


def test_a_clean_start_between_failures_resets_the_count() -> None:
    h = NodeHealth()
    h.observe(_dirty("a"))
    h.observe(_result("a"))
    h.observe(_dirty("a"))
    assert not h.quarantined("a")
    h.observe(_dirty("a"))
    assert h.quarantined("a")


def test_failures_are_counted_per_node() -> None:
    h = NodeHealth()
    h.observe(_dirty("a"))
    h.observe(_dirty("b"))
    assert h.quarantined_nodes == frozenset()


def test_results_that_say_nothing_about_the_gpus_do_not_reset() -> None:
    h = NodeHealth()
    h.observe(_dirty("a"))
    # failed before the GPU check (no samples), and a lost trial with no node id
    h.observe(_result("a", FailureKind.CRASH, gpu_before=()))
    h.observe(_result("", FailureKind.NODE_LOST, gpu_before=()))
    h.observe(_dirty("a"))
    assert h.quarantined("a")


def test_other_failures_after_a_clean_check_reset_the_count() -> None:
    h = NodeHealth()
    h.observe(_dirty("a"))
    h.observe(_result("a", FailureKind.OOM))  # the GPUs were clean before this one
    h.observe(_dirty("a"))
    assert not h.quarantined("a")


def test_max_failures_is_configurable() -> None:
    h = NodeHealth(max_failures=3)
    for _ in range(2):
        h.observe(_dirty("a"))
    assert not h.quarantined("a")
    h.observe(_dirty("a"))
    assert h.quarantined("a")
    with pytest.raises(ValueError):
        NodeHealth(max_failures=0)


def test_report_names_quarantined_nodes_first_with_the_last_reason() -> None:
    h = NodeHealth()
    h.observe(_dirty("a"))
    h.observe(_dirty("z"))
    h.observe(_dirty("z"))
    h.observe(_result("ok-node"))
    lines = h.report()
    assert len(lines) == 2
    assert lines[0].startswith("node z: quarantined") and "2 in a row" in lines[0]
    assert "gpu_not_clean on z" in lines[0]
    assert lines[1].startswith("node a: in rotation")


def test_board_lists_every_node_with_its_last_gpu_reading_quarantined_first() -> None:
    h = NodeHealth()
    h.observe(_result("ok-node"))
    h.observe(_dirty("z"))
    h.observe(_dirty("z"))
    h.observe(_result("lost", FailureKind.NODE_LOST, gpu_before=()))
    lines = h.board()
    assert lines[0] == (
        "node z: QUARANTINED (gpu_not_clean on z); GPU memory used/total MiB 0:70000/143771 1:0/143771"
    )
    assert lines[1] == "node lost: in rotation; GPU memory used/total MiB no reading"
    assert lines[2] == "node ok-node: in rotation; GPU memory used/total MiB 0:0/143771 1:0/143771"


# -- pick_node -------------------------------------------------------------------------------------


def _node(node_id: str, alive: bool = True, slot: float = 1.0, gpus: float = 8.0) -> dict[str, Any]:
    resources: dict[str, float] = {"CPU": 192.0, "GPU": gpus}
    if slot:
        resources["trial_slot"] = slot
    return {"NodeID": node_id, "Alive": alive, "Resources": resources}


def test_pick_node_skips_dead_busy_quarantined_and_slotless_nodes() -> None:
    nodes = [
        _node("e-head", slot=0, gpus=0),
        _node("d-dead", alive=False),
        _node("c-busy"),
        _node("b-quarantined"),
        _node("f-free"),
    ]
    assert pick_node(nodes, busy={"c-busy"}, quarantined={"b-quarantined"}) == "f-free"
    assert pick_node(nodes, busy={"c-busy", "f-free"}, quarantined={"b-quarantined"}) is None


def test_pick_node_is_reproducible_and_checks_gpus() -> None:
    nodes = [_node("bbb"), _node("aaa", gpus=4), _node("ccc")]
    assert pick_node(nodes, set(), set()) == "aaa"
    assert pick_node(nodes, set(), set(), gpus=8) == "bbb"
    assert pick_node([], set(), set()) is None


def test_pick_node_reads_ray_nodes_as_ray_returns_them(ray_local: dict[str, Any]) -> None:
    node_id = ray_local["node_id"]
    assert pick_node(ray.nodes(), set(), set()) == node_id
    assert pick_node(ray.nodes(), set(), {node_id}) is None


# -- inside Ray ------------------------------------------------------------------------------------


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
            resources={"trial_slot": 1},
            include_dashboard=False,
            logging_level=logging.WARNING,
            log_to_driver=False,
            _metrics_export_port=port,
        )
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
    health.record_gpu_samples(node_id, samples, clean)
    health.record_running(node_id, True)
    return True


def test_record_functions_reach_the_metrics_agent(ray_local: dict[str, Any]) -> None:
    node_id = ray_local["node_id"]
    assert ray.get(_record_on_node.remote(node_id, DIRTY, False))
    health.record_trial_finished(TrialStatus.OOM)
    health.record_trial_finished(TrialStatus.OOM)
    health.record_best(1234.5)
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


def test_gauges_outlive_the_agents_ttl(ray_local: dict[str, Any]) -> None:
    # With a 200 ms report interval the agent drops a gauge not set for 2 s; the refresher keeps it.
    health.record_best(777.0)
    _wait_for(ray_local["metrics_port"], ["ray_specsweep_best_output_tok_per_s| 777.0"])
    time.sleep(3.0)
    _wait_for(ray_local["metrics_port"], ["ray_specsweep_best_output_tok_per_s| 777.0"], timeout_s=1.0)


def test_record_functions_are_silent_outside_ray(monkeypatch: pytest.MonkeyPatch) -> None:
    """Outside Ray (the trial tests, a laptop) nothing is created, kept or started for the agent."""
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(health, "_metrics", None)
    monkeypatch.setattr(health, "_refresher", None)
    monkeypatch.setattr(health, "_last", {})
    health.record_gpu_samples("n", CLEAN, True)
    health.record_trial_finished(TrialStatus.OK)
    health.record_running("n", False)
    health.record_best(1.0)
    health.refresh()
    assert health._metrics is None and health._refresher is None
    assert health._last == {}


@ray.remote(num_cpus=0)
def _where() -> str:
    return ray.get_runtime_context().get_node_id()


def test_pinned_options_steer_a_real_task(ray_local: dict[str, Any]) -> None:
    node_id = ray_local["node_id"]
    assert ray.get(_where.options(**pinned_to(node_id)).remote(), timeout=30) == node_id


def test_record_functions_never_raise(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken() -> None:
        raise RuntimeError("metrics agent gone")

    monkeypatch.setattr(health, "_ensure", broken)
    monkeypatch.setattr(health, "_last", {})
    health.record_gpu_samples("n", CLEAN, True)
    health.record_trial_finished(TrialStatus.OK)
    health.record_running("n", False)
    health.record_best(1.0)
    assert health._last == {}  # nothing half-recorded before the failure
