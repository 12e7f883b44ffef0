"""The records of a real two-node sweep: two Ray nodes on one host with two H200s, one GPU each
(`ray.cluster_utils.Cluster`, CUDA_VISIBLE_DEVICES per raylet), SGLang 0.5.17, made by
`tools/gpu-check.sh`. One trial's GPU process was SIGKILLed during its start-up.

The records are read back with the product's own reader (the journal's pydantic adapter, as a resumed
driver reads them) and the figures the driver printed are computed again by the product's code from
them; the killed trial's server log goes through the product's parser. A bug in any of these fails here.
"""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path
from typing import Any

import pydantic
import pytest

from orchestrator.engines.sglang.logparse import parse_log
from orchestrator.records import FailureKind, FailureStage, TrialResult, TrialStatus

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "sglang" / "0.5.17"
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


def results() -> list[TrialResult]:
    adapter = pydantic.TypeAdapter(TrialResult)
    return [adapter.validate_python(r) for r in records()]


def _printed(driver: str, number: int) -> tuple[str, float | None, float | None, float | None]:
    """(status, tok/s, accept length, KV tokens) as the driver printed them for a trial: its progress
    line and its row of the end-of-run table."""
    progress = re.search(rf"^  trial +{number} (\S+) +(?:([\d.]+) tok/s)?", driver, re.M)
    row = re.search(rf"^ +{number} (\S+) +(\S+) +(\S+) .* (\d+|-)  mf", driver, re.M)
    assert progress and row, f"trial {number} is not in driver.log"
    tok = progress.group(2)
    accept = row.group(3)
    kv = row.group(4)
    return (
        progress.group(1),
        float(tok) if tok else None,
        float(accept) if accept != "-" else None,
        float(kv) if kv != "-" else None,
    )


@pytest.mark.parametrize("number", range(4))
def test_the_products_figures_from_each_record_are_what_the_driver_printed(number: int) -> None:
    result = results()[number]
    status, tok, accept, kv = _printed((RECORDS / "driver.log").read_text(), number)
    assert result.status.value == status
    figures = result.table_figures()  # the best stage, the one accept-length rule, the KV pool
    if tok is None:
        assert result.output_tok_per_s is None
    else:
        assert result.output_tok_per_s == pytest.approx(tok, abs=0.05)
        assert figures["accept_length"] == pytest.approx(accept, abs=0.005)
        assert figures["kv_cache_tokens"] == kv
    assert result.config.label() in (RECORDS / "driver.log").read_text()


def test_the_killed_trials_log_parses_to_its_record() -> None:
    killed = results()[0]
    report = parse_log((FIX / "scheduler-killed.log").read_text())
    assert not report.ready and report.failure is not None and killed.failure is not None
    assert (report.failure.stage, report.failure.kind) == (FailureStage.KV_ALLOCATION, FailureKind.CRASH)
    assert (report.failure.stage, report.failure.kind, report.failure.message) == (
        killed.failure.stage,
        killed.failure.kind,
        killed.failure.message,
    )
    # Weights loaded, then the scheduler died allocating the KV pool: the figures up to there, none after.
    assert report.memory.as_metrics() == killed.memory.as_metrics()
    assert report.memory.weights_gb and report.memory.kv_cache_tokens is None
    assert report.args is not None
    assert report.args.mem_fraction_static == killed.config.mem_fraction_static
    assert report.args.max_running_requests == killed.config.max_running_requests
