"""The benchmark harness's pieces, with tiny settings: the grid, the oracle against the real simulated
server, the strategies on the real decision code, the summaries and the table, and the CLI end to end."""

from __future__ import annotations

import json
import math
import os
import statistics
from pathlib import Path
from typing import Any

import optuna
import pytest

import benchmarks.run as bench_run
from benchmarks.client_ceiling import CeilingSettings
from benchmarks.giveup import GiveUpSettings
from benchmarks.heldout import feasible_share, generate
from benchmarks.live import live_spec, profile_dict
from benchmarks.noise import Launch, Launcher, noisy, stage_sd
from benchmarks.oracle import Oracle
from benchmarks.overhead import OverheadSettings
from benchmarks.regret import score
from benchmarks.scale import ScaleSettings
from benchmarks.search import SearchSettings
from benchmarks.spaces import CASES, case_spec
from benchmarks.specsweep_runs import VARIANTS
from benchmarks.specsweep_runs import strategy as specsweep_strategy
from benchmarks.strategies import PEERS, SearchRun, quiet_optuna, sglang_defaults
from benchmarks.table import Row, Table, median, ratio
from orchestrator.driver.answer.noise import Regime
from orchestrator.driver.memory.kv_admission import retracts
from orchestrator.driver.search.space import space_configs, suggest_config
from orchestrator.node.backends import SimulatedNode
from orchestrator.node.trial import TrialRun
from orchestrator.records import FailureStage, ServerConfig, TrialStatus
from orchestrator.sim.profile import SimProfile, load_profile
from orchestrator.spec.search import Choices, FloatRange, IntRange, SearchSpace, make_config
from orchestrator.spec.sweep_spec import WorkloadSpec
from orchestrator.trial_events import TrialRequest

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
    grid = space_configs(TINY_SPACE)
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
        space_configs(space)


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
    # Noise off: the oracle is the speed model's expectation, and a launch's slow noise moves the tiny
    # profile by 10-20 % (this seed's launch runs 21 % fast at first).
    profile = profile_dict(
        "h200-tiny", startup_time_scale=0.002, step_noise=0.0, launch_noise=0.0, drift_noise=0.0
    )
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
    expected_memory, measured_memory = expected.memory.as_metrics(), measured.memory.as_metrics()
    assert set(expected_memory) == set(measured_memory)
    for key, value in expected_memory.items():
        assert value == pytest.approx(measured_memory[key], abs=0.011), key
    if status is TrialStatus.OK:
        # The live server paces its steps to the model's time (its own Python time no longer adds to each
        # ~4.5 ms step, 17 % once). What it adds per wave is the client's round trip and a split prefill:
        # the first request arrives alone and pays this profile's 6 ms prefill base once more (5-7 %). Above
        # that, headroom for a busy machine: a stage of 0.6 s on 2 shared cores.
        assert expected.objective is not None and measured.output_tok_per_s
        assert 0.97 <= expected.objective / measured.output_tok_per_s <= 1.25


def test_kv_probe_replay_follows_the_scheduler_rules() -> None:
    # 4 requests of 64 + 64 tokens: each is admitted with 64 + 0.7 x 64 = 109 tokens reserved.
    assert not retracts(10_000, 4, 64, 64, per_step=4, gain=1.0)
    assert retracts(450, 4, 64, 64, per_step=4, gain=1.0)  # all 4 admitted, 512 needed at the end
    assert not retracts(300, 4, 64, 64, per_step=4, gain=1.0)  # only 2 admitted at once: no retraction
    assert retracts(50, 4, 64, 64, per_step=1, gain=1.0)  # not even one prompt fits


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


def test_every_strategy_starts_from_nothing() -> None:
    """Same start for all: no known-good configuration in any case's spec; specsweep launches the server
    without speculation first as it ships (its own choice, paid for like auto_benchmark's base stage)."""
    for case in CASES.values():
        spec = case_spec(case, gpus=1)
        assert spec.known_good == [] and not spec.budget.baseline
    assert VARIANTS["specsweep"].budget == {"baseline": True}


def test_sglang_defaults_follow_the_profile() -> None:
    case = CASES["kimi-k25-rtxpro6000"]
    oracle = Oracle(case_spec(case, gpus=8), load_profile(case.name))
    # Kimi: SGLang's auto fraction with EAGLE and the vision reduction is about 0.76; requests reset to 48.
    assert sglang_defaults(oracle) == (0.76, 512, 48)


@pytest.fixture(scope="module")
def tight() -> tuple[Oracle, list[ServerConfig], float]:
    case = CASES["tight"]
    oracle = Oracle(case_spec(case, gpus=1), load_profile(case.name))
    grid = space_configs(case.space)
    best = max(oracle.evaluate(c).objective or 0.0 for c in grid)
    return oracle, grid, best


def _launcher(oracle: Oracle, seed: int = 0, budget_s: float = 40 * 170.0) -> Launcher:
    return Launcher(oracle, seed, budget_gpu_s=budget_s, max_launches=120)


def test_noise_follows_the_measured_spread(tight: tuple[Oracle, list[ServerConfig], float]) -> None:
    """Two starts of one configuration differ by several per cent; short stages move more than long ones;
    the same (seed, configuration, launch) always draws the same figure."""
    assert stage_sd(0.3) == pytest.approx(0.15)
    assert 0.02 <= stage_sd(12.0) <= 0.10 and stage_sd(12.0) < stage_sd(1.0) < stage_sd(0.3)
    oracle, grid, _ = tight
    ev = next(oracle.evaluate(c) for c in grid if oracle.evaluate(c).objective is not None)
    draws = [noisy(ev, seed, 0).objective or 0.0 for seed in range(400)]
    true = ev.objective or 0.0
    rel = [d / true - 1 for d in draws]
    # launch offset 7 % and ~3 % per stage on these 25-90 s stages: between 6 and 10 % in all
    assert 0.06 <= statistics.pstdev(rel) <= 0.10
    pairs = [abs(draws[i] - draws[i + 1]) / true for i in range(0, 400, 2)]
    assert 0.05 <= statistics.mean(pairs) <= 0.12  # two starts differ by 6-9 % on a real H200
    assert noisy(ev, 3, 1) == noisy(ev, 3, 1) and noisy(ev, 3, 1) != noisy(ev, 3, 2)


def test_launcher_pays_every_launch_and_repeats_draw_anew(
    tight: tuple[Oracle, list[ServerConfig], float],
) -> None:
    oracle, grid, _ = tight
    ok = next(c for c in grid if oracle.evaluate(c).objective is not None)
    oom = next(c for c in grid if oracle.evaluate(c).status is TrialStatus.OOM)
    launcher = _launcher(oracle, budget_s=oracle.evaluate(ok).seconds() * 2.5)
    first, again = launcher.launch(ok), launcher.launch(ok)
    assert first.objective != again.objective and first.gpu_s == again.gpu_s > 0
    failed = launcher.launch(oom)
    assert failed.objective is None and failed.failed_at and 0 < failed.gpu_s < first.gpu_s
    assert launcher.launches_of(ok) == 2 and not launcher.exhausted
    launcher.launch(ok)
    assert launcher.exhausted  # the budget is GPU time, whatever the launches were
    # the default rule answers with the best single draw
    best = max((first, again, launcher.launches[-1]), key=lambda lc: lc.objective or 0.0)
    assert launcher.launches[-1].recommend == best.config


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


@pytest.mark.parametrize("name", [*PEERS, "specsweep"])
def test_strategies_spend_the_budget_on_the_space(
    name: str, tight: tuple[Oracle, list[ServerConfig], float]
) -> None:
    oracle, grid, _ = tight
    budget = 12 * 165.0
    launcher = Launcher(oracle, 0, budget_gpu_s=budget, max_launches=len(grid) if name == "grid" else 36)
    strategy = PEERS.get(name) or specsweep_strategy(name)
    run = strategy(launcher, grid)
    if name == "grid":
        assert len(run.launches) == len(grid)
    else:
        spent = sum(lc.gpu_s for lc in run.launches)
        last = run.launches[-1].gpu_s
        assert spent - last < budget or len(run.launches) == 36  # stops once the budget is spent
    for launch in run.launches:
        # auto_benchmark's base stage runs without speculation, as SGLang's does, and its speculative
        # stage's product can hold a tree the space leaves out (SGLang runs it as given)
        assert launch.config in set(grid) or not launch.config.speculative or name == "auto_benchmark"
        assert launch.gpu_s > 0
        if launch.objective is not None:
            assert launch.status is TrialStatus.OK
        assert (launch.failed_at != "") == launch.status.infeasible
    assert run.launches[-1].recommend is not None


@pytest.mark.slow  # seconds of real time (a simulated server, a sweep or a wait); left out of `make unit`
def test_generated_cases_are_reproducible_and_hit_their_feasible_share() -> None:
    first = generate(7, 1, heldout=True)
    again = generate(7, 1, heldout=True)
    assert [c.profile for c in first] == [c.profile for c in again] and first[0].heldout
    assert 0.15 <= feasible_share(first[0]) <= 0.35  # the first case's target: 25 % feasible


def test_table_helpers() -> None:
    assert median([1.0, math.inf, 3.0]) == 3.0
    assert math.isinf(median([1.0, math.inf]))
    assert ratio(4.0, 2.0) == 2.0 and ratio(math.inf, 2.0) == math.inf and ratio(1.0, math.inf) is None
    assert ratio(0.0, 0.0) == 1.0 and ratio(1.0, 0.0) == math.inf
    table = Table([Row("b", "c|d", "v", "m", math.inf, "> 5", 1.5)], ["a note"])
    md = table.markdown()
    assert "| b | c/d | v | m | > 5 | 1.50 |" in md and "1. a note" in md
    assert json.loads(table.dumps())["rows"][0]["value"] == "inf"


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
    from benchmarks.live import MINIMAL_WORKLOAD

    assert MINIMAL_WORKLOAD.min_stage_s == 0 and MINIMAL_WORKLOAD.min_stage_tokens == 0
