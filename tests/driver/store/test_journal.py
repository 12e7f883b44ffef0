"""The driver's journal: a trial's whole record, written when it settles and read back on --resume."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.driver.store.journal import Journal
from orchestrator.records import (
    DatasetMetrics,
    Failure,
    FailureKind,
    FailureStage,
    MemoryAccount,
    ResolvedLaunch,
    StageMetrics,
    TrialRecord,
    TrialResult,
    TrialStatus,
)
from orchestrator.spec.search import make_config


def _record(number: int) -> TrialRecord:
    stage = StageMetrics(
        8, 16, 16, 0, 2.0, 1234.5, 8.0, 30.0, 60.0, 5.0, 9.0, 6.0, 2.5,
        output_tok_per_s_ci95=(1200.0, 1270.0),
        by_dataset=(DatasetMetrics("generated-chat", 16, 16, 1234.5, 3.2, 6.0),),
    )  # fmt: skip
    result = TrialResult(
        config=make_config(
            0.85,
            16,
            16,
            3,
            1,
            4,
        ),
        status=TrialStatus.OK,
        node_id="n1",
        command=("python", "-m", "sglang.launch_server"),
        failure=Failure(FailureStage.UNDER_LOAD, FailureKind.KV_PRESSURE, "retracted"),
        stages=(stage,),
        memory=MemoryAccount(kv_cache_tokens=12_379_562, kv_cache_gb=94.4),
        resolved_args=ResolvedLaunch(mem_fraction_static=0.85, effective_max_running_requests=16),
        log_text="a long server log",
        greedy_outputs=((1, 2, 3), (4, 5)),
    )
    return TrialRecord(number, result, 1234.5, 1.2, baseline=False, extra_tags=(("lossless", "ok"),))


def test_a_record_reads_back_as_it_was_written_without_its_log(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "records")
    record = _record(7)
    journal.write(record)
    (back,) = journal.read([7])
    assert back.result.log_text == ""
    assert back == TrialRecord(
        7,
        type(record.result)(**{**record.result.__dict__, "log_text": ""}),
        1234.5,
        1.2,
        extra_tags=(("lossless", "ok"),),
    )
    assert back.result.stages[0].by_dataset[0].accept_length == 3.2
    assert back.result.status is TrialStatus.OK and back.result.config == record.result.config


def test_a_missing_or_broken_record_is_left_out(tmp_path: Path) -> None:
    journal = Journal(tmp_path)
    journal.write(_record(1))
    journal.path(2).write_text("{not json")
    assert [r.number for r in journal.read([3, 2, 1])] == [1]


def test_the_search_benchmarks_sweeps_write_no_journal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # They once wrote ./unused/records/*.json into the working tree on every run of the suite.
    from benchmarks.launches.noisy import Launcher
    from benchmarks.search.oracle_sweep import oracle_sweep
    from benchmarks.truth.cases import CASES, case_spec
    from benchmarks.truth.oracle import Oracle
    from orchestrator.sim.profile import load_profile

    monkeypatch.chdir(tmp_path)
    spec = case_spec(CASES["tight"], gpus=1)
    oracle = Oracle(spec, load_profile("tight"))
    sweep = oracle_sweep(spec, Launcher(oracle, seed=0, budget_gpu_s=1.0, max_launches=1), n_trials=1)
    sweep.journal.write(_record(1))
    assert sweep.journal.read([1]) == [] and not list(tmp_path.rglob("*.json"))


def test_a_memory_account_reads_back_from_its_metrics_with_counts_as_ints() -> None:
    account = MemoryAccount(avail_at_start_gb=139.09, kv_cache_tokens=12_379_562, graph_gb=0.06)
    back = MemoryAccount.from_metrics({**account.as_metrics(), "output_tok_per_s": 4160.0})
    assert back == account and isinstance(back.kv_cache_tokens, int)
