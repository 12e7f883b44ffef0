"""The informed bound is told the best speculative trees and spends the budget telling them apart."""

from __future__ import annotations

import pytest

from benchmarks.launches.noisy import Launcher
from benchmarks.peers.informed_bound import TOP_TREES, informed_bound
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


def test_informed_bound_is_told_the_top_trees(tight: tuple[Oracle, list[ServerConfig]]) -> None:
    oracle, grid = tight
    launcher = Launcher(oracle, 0, budget_gpu_s=40 * 170.0, max_launches=120, regime=Regime.GPU_BOUND)
    run = informed_bound(launcher, grid)
    launched = {lc.config for lc in run.launches}
    assert len(launched) == TOP_TREES
    best = max(grid, key=lambda c: oracle.evaluate(c).objective or 0.0)
    assert best in launched
