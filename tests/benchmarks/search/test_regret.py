"""Regret, time to within 2 %, the paired bootstrap and the regret tables' command."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from benchmarks.launches.noisy import Launch
from benchmarks.launches.run_record import SearchRun
from benchmarks.search.regret import main as regret_main
from benchmarks.search.regret import paired, score, summary_row
from orchestrator.records import ServerConfig, TrialStatus
from orchestrator.spec.search import make_config

# The product's sampler uses Optuna's `group` option, which Optuna still calls experimental.
pytestmark = pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")


def test_score_counts_gpu_hours_until_the_answer_is_right_and_stays_right() -> None:
    good, bad = make_config(0.8, 8, 8, 1, 1, 2), make_config(0.8, 8, 8, 2, 1, 3)
    truth = {good: 100.0, bad: 90.0}

    def run(*recs: ServerConfig) -> SearchRun:
        out = SearchRun("x", 0)
        out.launches = [Launch(c, TrialStatus.OK, 1.0, 3600.0, recommend=c) for c in recs]
        return out

    s = score(run(bad, good, bad, good, good), truth, 100.0, censor_h=10.0, censor_launches=40)
    assert s.right and s.gpu_h_to_2pct == pytest.approx(4.0) and s.launches == 5 and s.regret == 0.0
    s = score(run(good, good, bad), truth, 100.0, censor_h=10.0, censor_launches=40)
    assert not s.right and s.gpu_h_to_2pct == 10.0 and s.regret == pytest.approx(0.1)


def _run(recommends: list[ServerConfig | None], gpu_s: float = 3600.0) -> SearchRun:
    out = SearchRun("x", 7)
    out.launches = [
        Launch(c or make_config(0.8, 8, 8, 1, 1, 2), TrialStatus.OK, 1.0, gpu_s, recommend=c)
        for c in recommends
    ]
    return out


def test_regret_and_time_to_two_percent() -> None:
    good, near, bad = (
        make_config(0.8, 8, 8, 1, 1, 2),
        make_config(0.8, 8, 8, 2, 1, 3),
        make_config(0.8, 8, 8, 3, 1, 4),
    )
    truth = {good: 100.0, near: 97.5, bad: 90.0}
    s = score(_run([bad, good, bad, good, near]), truth, 100.0, censor_h=10.0, censor_launches=12)
    assert s.regret == pytest.approx(0.025) and not s.right and s.near
    assert s.launches_to_2pct == 12 and s.gpu_h_to_2pct == 10.0  # censored: counted as the budget
    s = score(_run([None, bad, good, good]), truth, 100.0, censor_h=10.0, censor_launches=12)
    assert s.regret == 0.0 and s.right and s.launches_to_2pct == 3 and s.gpu_h_to_2pct == pytest.approx(3.0)
    assert score(_run([None]), truth, 100.0, censor_h=1, censor_launches=1).regret == 1.0


def test_paired_bootstrap_resamples_case_seed_pairs() -> None:
    def row(strategy: str, regrets: list[float]) -> dict[str, object]:
        runs = [score(_run([None]), {}, 1.0, censor_h=1, censor_launches=1) for _ in regrets]
        runs = [replace(r, seed=i, regret=x) for i, (r, x) in enumerate(zip(runs, regrets, strict=True))]
        return summary_row("c", "gpu_bound", strategy, False, runs)

    ours = row("specsweep", [0.0, 0.01, 0.0, 0.05] * 5)
    peer = row("random", [0.03, 0.04, 0.0, 0.05] * 5)
    p = paired([ours, peer], "random", "gpu_bound", "development")
    assert p is not None and p.pairs == 20
    assert p.regret_diff == pytest.approx(-1.5) and p.regret_ci[0] < p.regret_diff < p.regret_ci[1] < 0
    assert p.hit_diff == pytest.approx(0.5) and p.hit_ci[0] > 0
    assert paired([ours], "random", "gpu_bound", "development") is None
    keys = {"case", "regime", "strategy", "heldout", "seeds", "regret_mean", "regret_p90", "hit_2pct",
            "hit_3pct", "launches_to_2pct_median", "gpu_hours_to_2pct_median",
            "oom_launches_median"}  # fmt: skip
    assert keys <= set(ours) and ours["regret_mean"] == pytest.approx(1.5) and ours["hit_2pct"] == 0.75


def test_regret_cli_prints_tables_and_comparisons(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runs = [score(_run([None]), {}, 1.0, censor_h=1, censor_launches=1)]
    rows = [summary_row("c", "gpu_bound", s, h, runs) for s in ("specsweep", "random") for h in (False, True)]
    path = tmp_path / "search.json"
    path.write_text(json.dumps(rows))
    assert regret_main([str(path)]) == 0
    out = capsys.readouterr().out
    assert "gpu_bound, development cases" in out and "gpu_bound, held-out cases" in out and "vs random" in out
    assert regret_main([str(tmp_path / "missing.json")]) == 2
