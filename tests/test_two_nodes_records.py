"""The records of a real two-node sweep: two Ray nodes on one host with two H200s, one GPU each
(`ray.cluster_utils.Cluster`, CUDA_VISIBLE_DEVICES per raylet), SGLang 0.5.17, made by
`tools/gpu-check.sh`. One trial's GPU process was SIGKILLed during its start-up."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

from orchestrator.records import TrialStatus
from orchestrator.server.logparse import parse_log

FIX = Path(__file__).resolve().parent / "fixtures" / "sglang" / "0.5.17"
RECORDS = FIX / "two-nodes"


def records() -> list[dict[str, Any]]:
    return [json.loads((RECORDS / f"trial-{n}.json").read_text()) for n in range(4)]


def test_every_trial_ran_on_its_own_nodes_gpu() -> None:
    gpu_of: dict[str, set[int]] = {}
    for r in records():
        assert "--tp-size" in r["command"] and r["command"][r["command"].index("--tp-size") + 1] == "1"
        indices = {s["index"] for s in (*r["gpu_before"], *r["gpu_after"])}
        assert len(indices) == 1  # the trial's NVML probe saw one GPU: the one Ray gave its node
        gpu_of.setdefault(r["node_id"], set()).update(indices)
    # Two nodes, each always on the same GPU, and not the same one.
    assert len(gpu_of) == 2 and all(len(g) == 1 for g in gpu_of.values())
    assert set.union(*gpu_of.values()) == {0, 1}


def test_trials_ran_in_parallel() -> None:
    spans = sorted((r["started_unix"], r["finished_unix"], r["node_id"]) for r in records())
    overlaps = [(a, b) for a, b in itertools.pairwise(spans) if b[0] < a[1]]
    assert overlaps and all(a[2] != b[2] for a, b in overlaps)  # only trials on different nodes overlap
    wall = spans[-1][1] - spans[0][0]
    busy = sum(r["wall_s"] for r in records())
    assert wall < 0.75 * busy  # two nodes: well under the time one node would need


def test_the_killed_trial_is_a_crash_with_a_clean_gpu_and_the_sweep_went_on() -> None:
    killed, *rest = records()
    assert TrialStatus(killed["status"]) is TrialStatus.FAILED and not TrialStatus.FAILED.infeasible
    assert killed["failure"]["kind"] == "crash"
    assert killed["failure"]["message"].startswith(
        "RuntimeError: Rank 0 scheduler died during initialization"
    )
    assert all(s["used_mib"] < 1024 and not s["processes"] for s in killed["gpu_after"])
    same_node = [r for r in rest if r["node_id"] == killed["node_id"]]
    assert same_node and all(r["started_unix"] >= killed["finished_unix"] for r in same_node)
    assert all(r["status"] == "ok" for r in rest)


def test_the_records_agree_with_the_logs() -> None:
    driver = (RECORDS / "driver.log").read_text()
    for n, r in enumerate(records()):
        assert f"trial   {n} {r['status']}" in driver
        if r["status"] == "ok":
            kv = r["memory"]["kv_cache_tokens"]
            assert f"{kv:.0f}" in driver
    # The killed trial's own server log is kept beside the other real logs.
    killed_log = parse_log((FIX / "scheduler-killed.log").read_text())
    assert killed_log.failure is not None and killed_log.failure.message == records()[0]["failure"]["message"]
