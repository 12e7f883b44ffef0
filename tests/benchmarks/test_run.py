"""`python -m benchmarks.run`: every benchmark with tiny settings, one table, and the live benchmarks'
short stage."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import benchmarks.run as bench_run
from benchmarks.search.efficiency import SearchSettings
from benchmarks.system.client_ceiling import CeilingSettings
from benchmarks.system.giveup import GiveUpSettings
from benchmarks.system.overhead import OverheadSettings
from benchmarks.system.scale import ScaleSettings
from orchestrator.driver.answer.noise import Regime

# The product's sampler uses Optuna's `group` option, which Optuna still calls experimental.
pytestmark = pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")


@pytest.mark.slow  # the whole benchmark CLI, about 20 s
def test_cli_writes_the_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tiny = bench_run.Settings(
        SearchSettings(
            budget=6,
            seeds=1,
            cases=("tight",),
            dev_generated=0,
            heldout_cases=1,
            heldout_seeds=1,
            heldout_seed=3,
            final_cases=1,
            final_seeds=1,
            final_seed=4,
            real_cases=1,
            real_seeds=1,
            regimes=(Regime.GPU_BOUND,),
        ),
        GiveUpSettings(repeats=1),
        CeilingSettings(shapes=((16, 4, 8),)),
        OverheadSettings(trials=1),
        ScaleSettings(nodes=(1,), trials=1),
    )
    monkeypatch.setattr(bench_run, "QUICK", tiny)
    monkeypatch.setattr(bench_run, "FULL", tiny)
    monkeypatch.setenv("PYTHONPATH", os.environ.get("PYTHONPATH", ""))  # main() extends it
    results = tmp_path / "RESULTS.md"
    argv = ["--quick", "--only", "search", "giveup", "ceiling", "--out", str(tmp_path / "out")]
    assert bench_run.main([*argv, "--results-md", str(results)]) == 0
    assert not results.exists()  # a quick run never overwrites the committed summary
    search = json.loads((tmp_path / "out" / "search.json").read_text())
    keys = {"case", "regime", "strategy", "heldout", "seeds", "regret_mean", "regret_p90", "hit_2pct",
            "hit_3pct", "launches_to_2pct_median", "gpu_hours_to_2pct_median",
            "oom_launches_median"}  # fmt: skip
    assert all(keys <= set(row) for row in search) and {r["regime"] for r in search} == {"gpu_bound"}
    assert {r["heldout"] for r in search} == {True, False}
    assert {r["strategy"] for r in search} >= {"grid", "random", "plain_tpe", "vllm_auto_tune", "specsweep"}
    data = json.loads((tmp_path / "out" / "results.json").read_text())
    benches = {row["bench"] for row in data["rows"]}
    assert benches == {"1 search efficiency", "2 time to give up", "4 client ceiling"}
    assert data["meta"]["cores"] and "uname" in data["meta"]
    give_up = [r for r in data["rows"] if r["bench"] == "2 time to give up"]
    assert all(r["value"] is not None and 0 <= r["value"] < 5 for r in give_up)
    ceiling = [r for r in data["rows"] if r["metric"] == "streamed tokens/s"]
    assert ceiling and ceiling[0]["value"] > 1000
    full = ["--only", "search", "--out", str(tmp_path / "out"), "--results-md", str(results)]
    assert bench_run.main(full) == 0
    text = results.read_text()
    assert text.startswith("# Benchmark results") and "python -m benchmarks.run --only search" in text
    assert "| benchmark | case |" in text


def test_the_overhead_and_scale_benchmarks_run_one_short_stage() -> None:
    """Their stage is 2 requests of 8 tokens so that what the orchestrator adds around a trial shows; the
    real-hardware stage minimum (20 s and 5000 tokens, which cycles the prompts) made each trial's stage
    54 s long and the node-time share a measure of the stage instead."""
    from benchmarks.system.live import MINIMAL_WORKLOAD

    assert MINIMAL_WORKLOAD.min_stage_s == 0 and MINIMAL_WORKLOAD.min_stage_tokens == 0


def test_the_benchmarks_run_and_print_in_their_numbers_order() -> None:
    """Seen: the table printed benchmarks 1, 2, 4, 3, 5 (the client ceiling ran before the overhead)."""
    from benchmarks.run import PARTS
    from benchmarks.search.notes import BENCH as SEARCH
    from benchmarks.system import client_ceiling, giveup, overhead, scale

    numbers = {
        "search": SEARCH,
        "giveup": giveup.BENCH,
        "ceiling": client_ceiling.BENCH,
        "overhead": overhead.BENCH,
        "scale": scale.BENCH,
    }
    assert [int(numbers[p].split()[0]) for p in PARTS] == [1, 2, 3, 4, 5]
