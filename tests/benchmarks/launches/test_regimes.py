"""Each noise regime draws the spread measured for it."""

from __future__ import annotations

import math
import statistics

import pytest

from benchmarks.launches.noisy import Launcher, noisy
from benchmarks.truth.cases import CASES, case_spec
from benchmarks.truth.oracle import Oracle
from orchestrator.driver.answer.noise import Regime
from orchestrator.driver.search.space import space_configs
from orchestrator.records import ServerConfig
from orchestrator.sim.profile import load_profile

pytestmark = pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")


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
