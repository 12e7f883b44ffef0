"""The benchmark harness's pieces, with tiny settings: the grid, the oracle against the real simulated
server, the strategies on the real decision code, the summaries and the table, and the CLI end to end."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import optuna
import pytest

import benchmarks.run as bench_run
from benchmarks.client_ceiling import CeilingSettings
from benchmarks.driver import oracle_sweep, run_on_oracle
from benchmarks.giveup import GiveUpSettings
from benchmarks.live import live_spec, profile_dict
from benchmarks.oracle import Oracle, probe_retracts
from benchmarks.overhead import OverheadSettings
from benchmarks.scale import ScaleSettings
from benchmarks.search import SearchSettings, summarize
from benchmarks.spaces import CASES, case_spec, enumerate_space
from benchmarks.strategies import STRATEGIES, Launch, SearchRun, quiet_optuna, sglang_defaults
from benchmarks.table import Row, Table, median, ratio
from orchestrator.node import SimulatedNode
from orchestrator.records import FailureStage, ServerConfig, TrialStatus
from orchestrator.sim.profile import SimProfile, load_profile
from orchestrator.space import suggest_config
from orchestrator.spec import Choices, FloatRange, IntRange, SearchSpace, WorkloadSpec, make_config
from orchestrator.trial import TrialRequest, TrialRun

# The product's sampler uses Optuna's `group` option, which Optuna still calls experimental.
pytestmark = pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")

TINY_SPACE = SearchSpace(
    mem_fraction_static=FloatRange(low=0.80, high=0.90, step=0.05),
    cuda_graph_max_bs=Choices(choices=[8, 16]),
    max_running_requests=Choices(choices=[8]),
    speculative_num_steps=IntRange(low=1, high=2),
    speculative_eagle_topk=Choices(choices=[1, 2]),
    speculative_num_draft_tokens=IntRange(low=2, high=4),
)


def test_grid_is_exactly_what_suggest_config_can_propose() -> None:
    grid = enumerate_space(TINY_SPACE)
    # Per memory point: top-k 1 gives d = s + 1 (2 trees); top-k 2 gives d in [s+1, 2s+1] within 2..4:
    # s1 -> 2, 3 and s2 -> 3, 4. So 6 trees x 3 fractions x 2 graph sizes.
    assert len(grid) == len(set(grid)) == 6 * 3 * 2
    topk1 = [c for c in grid if c.speculative_eagle_topk == 1]
    assert all(c.speculative_num_draft_tokens == (c.speculative_num_steps or 0) + 1 for c in topk1)
    quiet_optuna()
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1))
    sampled = {suggest_config(study.ask(), TINY_SPACE) for _ in range(300)}
    assert sampled == set(grid)


def test_grid_refuses_a_continuous_range() -> None:
    space = TINY_SPACE.model_copy(update={"mem_fraction_static": FloatRange(low=0.8, high=0.9)})
    with pytest.raises(ValueError, match="step"):
        enumerate_space(space)


def _sim_trial(tmp_path: Path, spec: Any, profile: dict[str, Any], config: ServerConfig) -> Any:
    request = TrialRequest(spec=spec, config=config, number=0, workdir=str(tmp_path / config.label()))
    node = SimulatedNode(spec, f"bench-{tmp_path.name}", profile)
    return TrialRun(request, node, None).run()


@pytest.mark.parametrize(
    ("config", "status", "stage"),
    [
        (make_config(0.85, 16, 16, 3, 1, 4), TrialStatus.OK, None),
        (make_config(0.99, 512, 512, 3, 1, 4), TrialStatus.OOM, FailureStage.TARGET_GRAPH_CAPTURE),
        (make_config(0.001, 16, 16, 3, 1, 4), TrialStatus.OOM, FailureStage.KV_ALLOCATION),
    ],
)
def test_oracle_matches_the_simulated_server(
    tmp_path: Path, config: ServerConfig, status: TrialStatus, stage: FailureStage | None
) -> None:
    """The oracle's outcome and memory account are what the trial reads from the real server's log, and
    its throughput is close to what the real benchmark client measures."""
    profile = profile_dict("h200-tiny", startup_time_scale=0.002)
    workload = WorkloadSpec(
        num_prompts=8,
        input_len=64,
        output_len=64,
        concurrency=[4],
        warmup_prompts=0,
        min_stage_s=0,
        min_stage_tokens=0,
    )
    spec = live_spec("oracle-check", profile, workload=workload)
    expected = Oracle(spec, SimProfile.model_validate(profile)).evaluate(config)
    measured = _sim_trial(tmp_path, spec, profile, config)
    assert measured.status is status and expected.status is status
    if stage is not None:
        assert measured.failure.stage is stage and expected.failure is not None
        assert expected.failure.stage is stage
    assert set(expected.memory) == set(measured.memory)
    for key, value in expected.memory.items():
        assert value == pytest.approx(measured.memory[key], abs=0.011), key
    if status is TrialStatus.OK:
        # The oracle is the speed model's expectation; the live server adds its own Python time to every
        # ~3 ms step on this profile (about 20 %), never less than the model.
        assert expected.objective is not None and measured.output_tok_per_s
        assert 0.95 <= expected.objective / measured.output_tok_per_s <= 1.4


def test_kv_probe_replay_follows_the_scheduler_rules() -> None:
    # 4 requests of 64 + 64 tokens: each is admitted with 64 + 0.7 x 64 = 109 tokens reserved.
    assert not probe_retracts(10_000, 4, 64, 64, per_step=4, gain=1.0)
    assert probe_retracts(450, 4, 64, 64, per_step=4, gain=1.0)  # all 4 admitted, 512 needed at the end
    assert not probe_retracts(300, 4, 64, 64, per_step=4, gain=1.0)  # only 2 admitted at once: no retraction
    assert probe_retracts(50, 4, 64, 64, per_step=1, gain=1.0)  # not even one prompt fits


@pytest.mark.parametrize(("pool", "status"), [(450, TrialStatus.KV_PRESSURE), (300, TrialStatus.OK)])
def test_oracle_kv_pressure_matches_the_trial_probe(tmp_path: Path, pool: int, status: TrialStatus) -> None:
    """A KV pool capped below the requests' demand: the oracle's replay and the trial's real probe agree."""
    profile = profile_dict("h200-tiny", startup_time_scale=0.002)
    workload = WorkloadSpec(
        num_prompts=4,
        input_len=64,
        output_len=64,
        concurrency=[4],
        warmup_prompts=0,
        min_stage_s=0,
        min_stage_tokens=0,
    )
    spec = live_spec("kv-check", profile, workload=workload)
    spec = spec.model_copy(
        update={"server": spec.server.model_copy(update={"flags": ["--max-total-tokens", str(pool)]})}
    )
    config = make_config(0.85, 16, 4, 3, 1, 4)
    expected = Oracle(spec, SimProfile.model_validate(profile)).evaluate(config)
    measured = _sim_trial(tmp_path, spec, profile, config)
    assert expected.status is status and measured.status is status


def test_sglang_defaults_follow_the_profile() -> None:
    case = CASES["kimi-k25-rtxpro6000"]
    oracle = Oracle(case_spec(case, gpus=8), load_profile(case.name))
    # Kimi: SGLang's auto fraction with EAGLE and the vision reduction is about 0.76; requests reset to 48.
    assert sglang_defaults(oracle) == (0.76, 512, 48)


@pytest.fixture(scope="module")
def tight() -> tuple[Oracle, list[ServerConfig], float]:
    case = CASES["tight"]
    oracle = Oracle(case_spec(case, gpus=1), load_profile(case.name))
    grid = enumerate_space(case.space)
    best = max(oracle.evaluate(c).objective or 0.0 for c in grid)
    return oracle, grid, best


@pytest.mark.parametrize("name", list(STRATEGIES))
def test_strategies_spend_the_budget_on_the_space(
    name: str, tight: tuple[Oracle, list[ServerConfig], float]
) -> None:
    oracle, grid, best = tight
    run = STRATEGIES[name](oracle, grid, 12, 0)
    expected = len(grid) if name == "grid" else 12
    assert len(run.launches) == expected
    spec_configs = set(grid)
    for launch in run.launches:
        if launch.config.speculative:
            assert launch.config in spec_configs
        assert launch.gpu_s > 0
        if launch.objective is not None:
            assert launch.status is TrialStatus.OK and launch.objective <= best + 1e-9
        assert (launch.failed_at != "") == launch.status.infeasible
    if name == "grid":
        assert max(lc.objective or 0.0 for lc in run.launches) == best


def test_specsweep_runs_the_real_driver_on_the_oracle(
    tight: tuple[Oracle, list[ServerConfig], float],
) -> None:
    """`Sweep.run` itself, with Ray stood in for: skips and answered repeats cost no launch, every stage
    goes through the event feed, and every infeasible launch is told to Optuna as a violated constraint."""
    oracle, grid, _ = tight
    sweep = oracle_sweep(oracle.spec, oracle, 15)
    records = run_on_oracle(sweep, oracle)
    launched = [r for r in records if r.result.node_id]
    assert len(launched) == 15
    assert len({r.result.config for r in launched}) == 15  # the driver's repeat check holds
    trials = sweep.study.get_trials()
    repeats = [t for t in trials if "repeat_of" in t.user_attrs]
    assert len(trials) == len(records) + len(repeats)
    assert all(t.state.is_finished() for t in trials)
    infeasible = [t for t in trials if t.user_attrs.get("status") in {"oom", "kv_pressure", "predicted_oom"}]
    assert infeasible and all(
        t.state is optuna.trial.TrialState.PRUNED and t.constraints == {"oom": 1.0} for t in infeasible
    )
    ok = [r for r in launched if r.result.status is TrialStatus.OK]
    assert ok and all(len(r.result.stages) == len(oracle.spec.workload.concurrency) for r in ok)
    assert all(r.result.config in set(grid) for r in launched)
    assert sweep.model.ready  # the memory model learned from the oracle's memory accounts
    assert sweep.outcome.progress.best_tok_s == max(r.objective or 0.0 for r in ok)


def test_specsweep_strategy_counts_launches_and_skips(
    tight: tuple[Oracle, list[ServerConfig], float],
) -> None:
    oracle, grid, _ = tight
    run = STRATEGIES["specsweep"](oracle, grid, 12, 3)
    assert len(run.launches) == 12 and run.skipped >= 0 and run.repeats_answered >= 0
    assert run.mispredicted <= sum(lc.status is TrialStatus.OOM for lc in run.launches)


def test_summary_counts_launches_and_gpu_time_to_the_target() -> None:
    config = make_config(0.8, 8, 8, 1, 1, 2)
    run = SearchRun("x", 0)
    run.launches = [
        Launch(config, TrialStatus.OOM, None, 3600.0, "kv_allocation"),
        Launch(config, TrialStatus.OK, 90.0, 7200.0),
        Launch(config, TrialStatus.OK, 99.0, 3600.0),
    ]
    s = summarize(run, best=100.0, target=0.98)
    assert s.reached and s.launches_to == 3 and s.gpu_h_to == pytest.approx(4.0)
    assert s.oom_launches == 1 and s.repeats == 2 and s.best_frac == pytest.approx(0.99)
    missed = summarize(run, best=200.0, target=0.98)
    assert not missed.reached and math.isinf(missed.launches_to) and math.isinf(missed.gpu_h_to)


def test_table_helpers() -> None:
    assert median([1.0, math.inf, 3.0]) == 3.0
    assert math.isinf(median([1.0, math.inf]))
    assert ratio(4.0, 2.0) == 2.0 and ratio(math.inf, 2.0) == math.inf and ratio(1.0, math.inf) is None
    assert ratio(0.0, 0.0) == 1.0 and ratio(1.0, 0.0) == math.inf
    table = Table([Row("b", "c|d", "v", "m", math.inf, "> 5", 1.5)], ["a note"])
    md = table.markdown()
    assert "| b | c/d | v | m | > 5 | 1.50 |" in md and "1. a note" in md
    assert json.loads(table.dumps())["rows"][0]["value"] == "inf"


def test_cli_writes_the_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tiny = bench_run.Settings(
        SearchSettings(budget=6, seeds=1, cases=("tight",)),
        GiveUpSettings(repeats=1),
        CeilingSettings(shapes=((16, 4, 8),)),
        OverheadSettings(trials=1),
        ScaleSettings(nodes=(1,), trials=1),
    )
    monkeypatch.setattr(bench_run, "QUICK", tiny)
    monkeypatch.setenv("PYTHONPATH", os.environ.get("PYTHONPATH", ""))  # main() extends it
    results = tmp_path / "RESULTS.md"
    argv = ["--quick", "--only", "search", "giveup", "ceiling", "--out", str(tmp_path / "out")]
    assert bench_run.main([*argv, "--results-md", str(results)]) == 0
    data = json.loads((tmp_path / "out" / "results.json").read_text())
    benches = {row["bench"] for row in data["rows"]}
    assert benches == {"1 search efficiency", "2 time to give up", "4 client ceiling"}
    assert data["meta"]["cores"] and "uname" in data["meta"]
    give_up = [r for r in data["rows"] if r["bench"] == "2 time to give up"]
    assert all(r["value"] is not None and 0 <= r["value"] < 5 for r in give_up)
    ceiling = [r for r in data["rows"] if r["metric"] == "streamed tokens/s"]
    assert ceiling and ceiling[0]["value"] > 1000
    text = results.read_text()
    assert text.startswith("# Benchmark results") and "python -m benchmarks.run --quick" in text
    assert "| benchmark | case |" in text
