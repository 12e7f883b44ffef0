"""The search benchmark's noise regimes, the peers as their tools run them, regret and its paired
comparisons, and the replay of a measured grid."""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import replace
from pathlib import Path

import pytest

from benchmarks.noise import Launch, Launcher, noisy
from benchmarks.oracle import Oracle
from benchmarks.peers import (
    auto_benchmark,
    build_candidates,
    sglang_defaults,
    sglang_tree,
    usual_tree,
    vllm_auto_tune,
)
from benchmarks.regret import main as regret_main
from benchmarks.regret import paired, score, summary_row
from benchmarks.replay import ReplayOracle, Unmeasured, load_records, replay, replay_rows
from benchmarks.search import Truth
from benchmarks.search_run import SearchRun
from benchmarks.spaces import CASES, case_spec
from benchmarks.strategies import TOP_TREES, informed_bound
from orchestrator.driver.answer.noise import Regime
from orchestrator.driver.search.space import space_configs
from orchestrator.records import ServerConfig, TrialStatus
from orchestrator.sim.profile import load_profile
from orchestrator.spec.search import IntRange, make_config
from orchestrator.spec.sweep_spec import load_spec

pytestmark = pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")
ROOT = Path(__file__).resolve().parents[2]
SWEEP_RECORD = ROOT / "tests" / "fixtures" / "sglang" / "0.5.17" / "llama8b-sweep" / "records" / "0000.json"
GRID_SPEC = ROOT / "trials" / "h200-8b-grid.yaml"


@pytest.fixture(scope="module")
def tight() -> tuple[Oracle, list[ServerConfig]]:
    case = CASES["tight"]
    return Oracle(case_spec(case, gpus=1), load_profile(case.name)), space_configs(case.space)


def _spread(oracle: Oracle, config: ServerConfig, regime: Regime) -> float:
    ev = oracle.evaluate(config)
    draws = [noisy(ev, seed, 0, regime=regime).objective or 0.0 for seed in range(300)]
    return statistics.stdev(draws) / statistics.fmean(draws)


def test_regimes_draw_the_measured_spread(tight: tuple[Oracle, list[ServerConfig]]) -> None:
    """GPU-bound launches move by about 1 % (0.5 % launch to launch and 1 % a stage, the best of two
    stages), overhead-bound ones by several per cent."""
    oracle, grid = tight
    config = next(c for c in grid if oracle.evaluate(c).objective is not None)
    gpu = _spread(oracle, config, Regime.GPU_BOUND)
    overhead = _spread(oracle, config, Regime.OVERHEAD_BOUND)
    assert 0.004 < gpu < 0.015
    assert overhead > 0.05
    launcher = Launcher(oracle, 0, budget_gpu_s=math.inf, max_launches=5, regime=Regime.GPU_BOUND)
    assert launcher.measure(config) == noisy(oracle.evaluate(config), 0, 0, regime=Regime.GPU_BOUND)


def test_build_candidates_is_sglang_tier_two() -> None:
    """The base, then the product of the first three flags (first three values each), then the others one
    at a time; duplicates dropped; at most 8 including the base."""
    space = [("a", [1.0, 2.0, 3.0, 4.0]), ("b", [1.0, 2.0]), ("c", [1.0])]
    got = build_candidates({}, space)
    assert got == [
        {},
        {"a": 1.0, "b": 1.0, "c": 1.0},
        {"a": 1.0, "b": 2.0, "c": 1.0},
        {"a": 2.0, "b": 1.0, "c": 1.0},
        {"a": 2.0, "b": 2.0, "c": 1.0},
        {"a": 3.0, "b": 1.0, "c": 1.0},
        {"a": 3.0, "b": 2.0, "c": 1.0},
    ]  # a's fourth value is cut by tier 2
    tail = build_candidates({"a": 1.0}, [("a", [1.0]), ("b", [1.0]), ("c", [1.0]), ("d", [5.0, 6.0])])
    assert tail == [{"a": 1.0}, {"a": 1.0, "b": 1.0, "c": 1.0}, {"a": 1.0, "d": 5.0}, {"a": 1.0, "d": 6.0}]
    big = build_candidates({}, [("a", [1.0, 2.0, 3.0]), ("b", [1.0, 2.0, 3.0]), ("c", [1.0, 2.0, 3.0])])
    assert len(big) == 8 and big[0] == {} and all(c["a"] == 1.0 for c in big[1:])
    assert (
        sglang_tree(3, 1, 8) == (3, 1, 4)
        and sglang_tree(2, 4, 8) == (2, 4, 8)
        and sglang_tree(1, 2, 8) == (1, 2, 8)
    )


def test_auto_benchmark_runs_its_speculative_stage_on_the_best_base(
    tight: tuple[Oracle, list[ServerConfig]],
) -> None:
    oracle, grid = tight
    launcher = Launcher(oracle, 3, budget_gpu_s=math.inf, max_launches=100, regime=Regime.GPU_BOUND)
    run = auto_benchmark(launcher, grid)
    base = [lc for lc in run.launches if not lc.config.speculative]
    spec = [lc for lc in run.launches if lc.config.speculative]
    assert len(base) == 8 and 1 <= len(spec) <= 8 and len(run.launches) == len(base) + len(spec)
    assert run.launches[: len(base)] == base  # the base stage first
    best = max((lc for lc in base if lc.objective is not None), key=lambda lc: lc.objective or 0.0)
    memory = {
        (lc.config.mem_fraction_static, lc.config.cuda_graph_max_bs, lc.config.max_running_requests)
        for lc in spec
    }
    flags = (best.config.mem_fraction_static, best.config.cuda_graph_max_bs, best.config.max_running_requests)
    # the first base sets no flag: if it wins, SGLang's speculative defaults fill them in again
    assert memory == {sglang_defaults(oracle) if best is base[0] else flags}
    # its answer is the best single draw over both stages
    top = max((lc for lc in run.launches if lc.objective is not None), key=lambda lc: lc.objective or 0.0)
    assert run.launches[-1].recommend == top.config


def test_vllm_auto_tune_steps_the_fraction_down_then_grids_the_batch_flags(
    tight: tuple[Oracle, list[ServerConfig]],
) -> None:
    oracle, grid = tight
    space = oracle.spec.search
    launcher = Launcher(oracle, 1, budget_gpu_s=math.inf, max_launches=100, regime=Regime.GPU_BOUND)
    run = vllm_auto_tune(launcher, grid)
    started = next(i for i, lc in enumerate(run.launches) if lc.failed_at in ("", "under_load"))
    probes = run.launches[: started + 1]
    assert probes[-1].objective is None  # start_server only: nothing benchmarked
    first = run.launches[0].config
    assert first.mem_fraction_static == pytest.approx(space.mem_fraction_static.high)  # 0.96 <= 0.98
    assert first.cuda_graph_max_bs == max(space.cuda_graph_max_bs.choices)
    assert first.max_running_requests == max(space.max_running_requests.choices)
    chosen = probes[-1].config.mem_fraction_static
    fractions = [lc.config.mem_fraction_static for lc in run.launches[: len(probes)]]
    assert fractions == sorted(fractions, reverse=True) and len(set(fractions)) == len(fractions)
    rest = run.launches[len(probes) :]
    cells = {(lc.config.cuda_graph_max_bs, lc.config.max_running_requests) for lc in rest}
    assert (
        len(rest)
        == len(cells)
        == len(space.cuda_graph_max_bs.choices) * len(space.max_running_requests.choices)
    )
    assert {lc.config.mem_fraction_static for lc in rest} == {chosen}
    trees = {
        (
            lc.config.speculative_num_steps,
            lc.config.speculative_eagle_topk,
            lc.config.speculative_num_draft_tokens,
        )
        for lc in run.launches
    }
    assert trees == {usual_tree(oracle)}  # no speculation tuning


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


def test_informed_bound_is_told_the_top_trees(tight: tuple[Oracle, list[ServerConfig]]) -> None:
    oracle, grid = tight
    launcher = Launcher(oracle, 0, budget_gpu_s=40 * 170.0, max_launches=120, regime=Regime.GPU_BOUND)
    run = informed_bound(launcher, grid)
    launched = {lc.config for lc in run.launches}
    assert len(launched) == TOP_TREES
    best = max(grid, key=lambda c: oracle.evaluate(c).objective or 0.0)
    assert best in launched


def _grid_folder(tmp_path: Path) -> Path:
    """A measured grid in the product's record format, from one real 8B record: the objective grows with
    the fraction and the graph size, so (0.95, 256, 256) is the best cell."""
    base = json.loads(SWEEP_RECORD.read_text())
    folder = tmp_path / "grid" / "records"
    folder.mkdir(parents=True)
    spec = load_spec(GRID_SPEC)
    n = 0
    for mem in spec.search.mem_fraction_static.choices:  # type: ignore[union-attr]
        for gbs in (16, 64, 256):
            for mrr in (16, 256):
                if mrr == 16 and gbs != 16:
                    continue  # the same server as graph bs 16: not measured
                rec = json.loads(json.dumps(base))
                rec["number"] = n
                rec["result"]["config"].update(
                    mem_fraction_static=mem, cuda_graph_max_bs=gbs, max_running_requests=mrr,
                    speculative_num_steps=2, speculative_eagle_topk=1, speculative_num_draft_tokens=3,
                )  # fmt: skip
                scale = 1000.0 * mem + gbs + (0 if mrr == 16 else 300)
                for stage in rec["result"]["stages"]:
                    stage["output_tok_per_s"] = scale * stage["output_tok_per_s"] / rec["objective"]
                rec["objective"] = scale
                (folder / f"{n:04d}.json").write_text(json.dumps(rec))
                n += 1
    # the spec's baseline: the same server without speculation, at the first known-good's memory flags
    rec = json.loads(json.dumps(base))
    rec["number"], rec["baseline"], rec["objective"] = n, True, 900.0
    rec["result"]["config"].update(
        mem_fraction_static=0.5, cuda_graph_max_bs=16, max_running_requests=16,
        speculative_num_steps=None, speculative_eagle_topk=None, speculative_num_draft_tokens=None,
    )  # fmt: skip
    (folder / f"{n:04d}.json").write_text(json.dumps(rec))
    return folder.parent


def test_replay_answers_with_the_measured_cells(tmp_path: Path) -> None:
    folder = _grid_folder(tmp_path)
    records = load_records(folder)
    oracle = ReplayOracle(load_spec(GRID_SPEC), records)
    measured = make_config(0.8, 16, 16, 2, 1, 3)
    same = make_config(0.8, 256, 16, 2, 1, 3)  # graphs capped at max running 16: the graph-bs-16 server
    assert oracle.evaluate(same).objective == pytest.approx(oracle.evaluate(measured).objective or 0.0)
    assert oracle.evaluate(same).config == same
    truth = Truth(oracle, {measured: oracle.evaluate(measured).objective or 0.0})
    assert truth.get(same) == truth[measured]  # an answer is scored by the cell that answers for it
    with pytest.raises(Unmeasured):
        oracle.evaluate(make_config(0.8, 16, 16))  # the baseline was measured at 0.5 only
    best, results = replay(folder, GRID_SPEC, seeds=2, budget=4)
    assert best == pytest.approx(1000 * 0.95 + 256 + 300)
    by_name = {r.strategy: r for r in results}
    assert all(r.regret == 0.0 for r in by_name["grid"].runs)  # 0.5 % noise cannot hide a 2 % gap
    assert by_name["auto_benchmark"].error  # its bases without speculation were not measured
    assert by_name["random"].runs and not by_name["random"].error


def test_replay_rows_join_search_json(tmp_path: Path) -> None:
    folder = _grid_folder(tmp_path)
    rows, notes = replay_rows(folder, GRID_SPEC, seeds=2, budget=4)
    assert {r["set"] for r in rows} == {"real grid"} and {r["regime"] for r in rows} == {"gpu_bound"}
    assert "specsweep" in {r["strategy"] for r in rows} and any("auto_benchmark" in n for n in notes)
    assert replay_rows(tmp_path / "nothing")[0] == []


def test_auto_benchmark_lists_only_values_inside_a_range_its_step_does_not_divide() -> None:
    # 8..30 in steps of 8 is 8, 16, 24: a tier-2 user lists no 32, which the range does not hold.
    case = CASES["tight"]
    space = case.space.model_copy(update={"max_running_requests": IntRange(low=8, high=30, step=8)})
    spec = case_spec(case, gpus=1).model_copy(update={"search": space})
    oracle = Oracle(spec, load_profile(case.name))
    launcher = Launcher(oracle, 3, budget_gpu_s=math.inf, max_launches=100, regime=Regime.GPU_BOUND)
    run = auto_benchmark(launcher, space_configs(space))
    assert {lc.config.max_running_requests for lc in run.launches} <= {8, 16, 24}
