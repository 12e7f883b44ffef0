"""GPU hygiene quarantine: when a node leaves the rotation, and what resets its count."""

from __future__ import annotations

import pytest

from orchestrator.driver.dispatch.quarantine import NodeHealth
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
