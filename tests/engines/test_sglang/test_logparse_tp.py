"""Rank-tagged logs: real SGLang 0.5.17 at --tp-size 2 on two H200s, and the launcher's word on a killed
scheduler. Every line of a rank carries its tag; the ranks' lines interleave in any order."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.driver.memory.learned import MemoryModel
from orchestrator.driver.search.diagnosis import diagnose
from orchestrator.engines.sglang.logparse import SglangLogReport, parse_log
from orchestrator.records import FailureKind, FailureStage, TrialResult, TrialStatus
from orchestrator.spec.search import make_config

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "sglang" / "0.5.17"


def parse(name: str) -> SglangLogReport:
    return parse_log((FIX / name).read_text(encoding="utf-8"))


def test_tp2_start_has_per_gpu_figures_from_every_rank() -> None:
    report = parse("tp2-ok.log")
    assert report.ready and report.failure is None
    assert report.args is not None and report.args.tp_size == 2
    m = report.memory  # per GPU, read from rank 0
    assert (m.avail_at_start_gb, m.weights_gb, m.draft_weights_gb) == (138.18, 0.04, 0.02)
    assert m.kv_cache_tokens == m.draft_kv_cache_tokens == 24_618_345
    assert m.kv_cache_gb == pytest.approx(93.92) and m.draft_kv_cache_gb == pytest.approx(23.48)
    assert m.avail_end_gb == 19.19
    assert len(report.ranks) == 2
    for rank in report.ranks:
        assert rank.avail_at_start_gb == 138.18
        assert rank.weights_gb == (0.04, 0.02)  # target, then draft: both split over the two GPUs
        assert rank.kv_cache_tokens == (24_618_345, 24_618_345)
    assert [r.rank for r in report.ranks] == [0, 1]


def test_a_rank_line_glued_to_a_progress_bar_is_read() -> None:
    text = (FIX / "tp2-ok.log").read_text()
    glued = next(line for line in text.splitlines() if "it/s][2026-" in line)
    assert "TP1] Load weight end" in glued  # as printed: rank 1's line after rank 0's progress bar
    assert parse("tp2-ok.log").ranks[1].weights_gb == (0.04, 0.02)


def test_tp2_kv_oom_both_ranks_raise_and_the_first_is_reported() -> None:
    text = (FIX / "tp2-kv-oom.log").read_text()
    assert text.count("Scheduler hit an exception") == 2
    report = parse_log(text)
    assert report.failure is not None
    assert (report.failure.stage, report.failure.kind) == (FailureStage.KV_ALLOCATION, FailureKind.OOM)
    assert "Raise --mem-fraction-static above 0.001" in report.failure.message
    assert report.failed_rank == 0


def test_the_rank_that_dies_first_is_the_one_reported() -> None:
    """The same two tracebacks with rank 1's printed first, as happens when rank 1 gets there first."""
    lines = (FIX / "tp2-kv-oom.log").read_text().splitlines()
    starts = [i for i, line in enumerate(lines) if "Scheduler hit an exception" in line]
    end = next(i for i in range(starts[1], len(lines)) if lines[i].startswith("ValueError")) + 1
    swapped = lines[: starts[0]] + lines[starts[1] : end] + lines[starts[0] : starts[1]] + lines[end:]
    assert "TP1] Scheduler hit an exception" in swapped[starts[0]]
    report = parse_log("\n".join(swapped))
    assert report.failure is not None and report.failure.kind is FailureKind.OOM
    assert report.failed_rank == 1


def test_a_killed_scheduler_is_a_crash_naming_its_rank() -> None:
    report = parse("scheduler-killed.log")
    assert report.failure is not None and report.failure.kind is FailureKind.CRASH
    # "a common cause is the OS OOM killer": still not a CUDA out-of-memory error.
    assert report.failure.message.startswith("RuntimeError: Rank 0 scheduler died during initialization")
    assert report.failed_rank == 0


def tp2_result(name: str, config: tuple[float, int, int, int, int, int], status: TrialStatus) -> TrialResult:
    report = parse(name)
    return TrialResult(
        make_config(*config),
        status,
        "n",
        (),
        failure=report.failure,
        memory=report.memory,
    )


def test_diagnosis_at_tp2_uses_the_per_gpu_figures() -> None:
    model = MemoryModel(tp=2, kv_heads=8)
    model.observe(0, tp2_result("tp2-ok.log", (0.85, 16, 16, 3, 1, 4), TrialStatus.OK))
    oom = tp2_result("tp2-kv-oom.log", (0.0001, 16, 16, 3, 1, 4), TrialStatus.OOM)
    text = diagnose(oom, model)
    assert text.startswith(
        "OOM while allocating the KV cache: the target's weights take 0.04 GiB of 138.18 GiB"
    )
    assert "the draft's 0.02 GiB" in text and "per GPU" in text
    assert "Raise mem_fraction_static above 0.001." in text
    killed = tp2_result("scheduler-killed.log", (0.85, 16, 16, 3, 1, 4), TrialStatus.FAILED)
    assert diagnose(killed, model).startswith("crash at kv_allocation: RuntimeError: Rank 0 scheduler died")


def test_tp2_kv_prediction_within_5_percent_of_the_real_log() -> None:
    model = MemoryModel(tp=2, kv_heads=8)
    model.observe(0, tp2_result("tp2-ok.log", (0.85, 16, 16, 3, 1, 4), TrialStatus.OK))
    real = parse("tp2-ok-0.8.log").memory.kv_cache_tokens
    assert real == 23_169_075
    predicted = model.predict(make_config(0.80, 16, 16, 2, 1, 3)).kv_tokens
    assert predicted is not None and abs(predicted - real) < 0.05 * real


# --- tp 8: synthesized from the real tp=2 logs (not run on 8 GPUs; see the fixtures' README) ------


def test_tp8_every_rank_is_read_in_any_order() -> None:
    report = parse("tp8-ok.log")
    assert report.ready and report.args is not None and report.args.tp_size == 8
    assert [r.rank for r in report.ranks] == list(range(8))
    assert {(r.weights_gb, r.kv_cache_tokens) for r in report.ranks} == {((0.01, 0.01), (98_417_246,) * 2)}
    assert report.memory.kv_cache_tokens == 98_417_246 and report.memory.avail_at_start_gb == 138.05


def test_tp8_kv_oom_reports_the_rank_that_raised_first() -> None:
    report = parse("tp8-kv-oom.log")
    assert report.failure is not None
    assert (report.failure.stage, report.failure.kind) == (FailureStage.KV_ALLOCATION, FailureKind.OOM)
    assert report.failed_rank == 5 and len(report.ranks) == 8
