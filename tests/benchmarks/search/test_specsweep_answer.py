"""The search benchmark's specsweep is the product: its own sweep end to end, confirmation included, and
the answer the CLI prints.

A small case runs through the benchmark's specsweep strategy; the sweep's records then go through the
CLI's own ending (`driver.answer.conclusion.conclude`, which prints `best:` and writes best.json). The
benchmark's answer, after every launch and at the end, must be that one.
"""

from __future__ import annotations

import statistics
from pathlib import Path

import optuna
import pytest

from benchmarks.launches.noisy import Launcher, best_draw
from benchmarks.search.specsweep import VARIANTS, run_sweep
from benchmarks.search.specsweep import strategy as specsweep_strategy
from benchmarks.truth.cases import CASES, case_spec
from benchmarks.truth.oracle import Oracle
from orchestrator.driver.answer.conclusion import conclude
from orchestrator.driver.search.space import space_configs
from orchestrator.driver.store.trial_attrs import TrialAttr
from orchestrator.records import ServerConfig, TrialStatus
from orchestrator.sim.profile import load_profile

# The product's sampler uses Optuna's `group` option, which Optuna still calls experimental.
pytestmark = pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")

SEED = 1  # a run in which the best single draw and the product answer differently (asserted)


@pytest.fixture(scope="module")
def tight() -> tuple[Oracle, list[ServerConfig]]:
    case = CASES["tight"]
    return Oracle(case_spec(case, gpus=1), load_profile(case.name)), space_configs(case.space)


def _launcher(oracle: Oracle, grid: list[ServerConfig], launches: float, seed: int = SEED) -> Launcher:
    """A GPU-hour budget of `launches` median full launches, as the search benchmark sizes it."""
    typical = statistics.median(e.seconds() for c in grid if (e := oracle.evaluate(c)).objective is not None)
    return Launcher(oracle, seed, budget_gpu_s=launches * typical * oracle.gpus, max_launches=120)


def test_the_benchmark_answers_what_the_cli_prints(
    tight: tuple[Oracle, list[ServerConfig]], tmp_path: Path
) -> None:
    oracle, grid = tight
    launcher = _launcher(oracle, grid, 14)
    sweep = run_sweep(VARIANTS["specsweep"], launcher)
    records = sweep.outcome.records
    launched = [r for r in records if r.result.node_id]
    assert [lc.config for lc in launcher.launches] == [r.result.config for r in launched]

    # The CLI's own ending on the same records: the `best:` line and best.json.
    concluded = conclude(records, sweep.spec, tmp_path, sweep.lossless.lossy)
    assert concluded.best is not None
    cli = next(r.result.config for r in records if r.number == concluded.best.trial)
    assert concluded.lines[0].strip() == concluded.best.headline()
    assert concluded.lines[0].strip().startswith("best: ")
    final = launcher.launches[-1].recommend
    assert final == cli and final is not None and final.label() == concluded.best.config_label

    # After every launch: the answer the CLI would have printed had the sweep ended there.
    for k, launch in enumerate(launcher.launches):
        upto = launched[k].number
        seen = [r for r in records if r.number <= upto]
        then = conclude(seen, sweep.spec, tmp_path, sweep.lossless.lossy)
        expect = next(r.result.config for r in seen if r.number == then.best.trial) if then.best else None
        assert launch.recommend == expect, f"after launch {k}"

    # The run is one where another rule answers otherwise at some launch, so a benchmark that answered
    # with its best single draw instead of the product's answer would fail above.
    prefixes = [launcher.launches[: k + 1] for k in range(len(launcher.launches))]
    assert any(best_draw(p) != p[-1].recommend for p in prefixes)
    # the sweep's confirmation ran (the product may still answer with a configuration launched once, when
    # its one draw beats the confirmed medians: that is the CLI's rule, and so the benchmark's)
    assert any(TrialAttr.CONFIRM_OF in t.user_attrs for t in sweep.study.get_trials(deepcopy=False))


def test_the_strategy_is_that_sweep(tight: tuple[Oracle, list[ServerConfig]]) -> None:
    """The strategy the benchmark runs is `run_sweep` and nothing else: same launches, same answers."""
    oracle, grid = tight
    direct = _launcher(oracle, grid, 14)
    run_sweep(VARIANTS["specsweep"], direct)
    through = _launcher(oracle, grid, 14)
    run = specsweep_strategy("specsweep")(through, grid)
    assert [(lc.config, lc.objective, lc.recommend) for lc in run.launches] == [
        (lc.config, lc.objective, lc.recommend) for lc in direct.launches
    ]
    assert run.confirm_launches > 0


def test_specsweep_runs_the_product_sweep_on_the_oracle(tight: tuple[Oracle, list[ServerConfig]]) -> None:
    """`Sweep` itself on the oracle executor: skips and answered repeats cost no launch, every infeasible
    launch is told to Optuna as a violated constraint, the reserved confirmation launches run within the
    GPU-hour budget (the product's time budget), and nothing starts once it is spent."""
    oracle, grid = tight
    launcher = _launcher(oracle, grid, 20, seed=0)
    sweep = run_sweep(VARIANTS["specsweep"], launcher)
    records = sweep.outcome.records
    launched = [r for r in records if r.result.node_id]
    assert len(launched) == len(launcher.launches)
    trials = sweep.study.get_trials()
    assert all(t.state.is_finished() for t in trials)
    infeasible = [t for t in trials if t.user_attrs.get("status") in {"oom", "kv_pressure", "predicted_oom"}]
    assert all(
        t.state is optuna.trial.TrialState.PRUNED and t.constraints == {"oom": 1.0} for t in infeasible
    )
    ok = [r for r in launched if r.result.status is TrialStatus.OK]
    assert ok and all(r.result.config in set(grid) for r in launched if not r.baseline)
    assert [r.baseline for r in launched][:1] == [True]  # as it ships: the server without speculation first
    # the confirmation the spec's budget reserves (the top 2 configurations, 3 launches each) ran, after
    # the proposal policy's race, whose relaunches are confirmation launches too
    confirming = [t.number for t in trials if TrialAttr.CONFIRM_OF in t.user_attrs]
    assert len(confirming) >= 4
    assert {r.number for r in launched} >= set(confirming)
    # the launcher paid for exactly what the sweep ran, and every launch started within the budget
    assert sum(lc.gpu_s for lc in launcher.launches) == pytest.approx(sum(r.result.wall_s for r in launched))
    assert launcher.spent_s - launcher.launches[-1].gpu_s < launcher.budget_gpu_s
    assert launcher.exhausted or len(launcher.launches) == 120 or sweep.outcome.stop_reason
