"""Every strategy, the peers and specsweep, starts from nothing and spends its budget on the space."""

from __future__ import annotations

import pytest

from benchmarks.launches.noisy import Launcher
from benchmarks.peers.registry import PEERS
from benchmarks.search.specsweep import VARIANTS
from benchmarks.search.specsweep import strategy as specsweep_strategy
from benchmarks.truth.cases import CASES, case_spec
from benchmarks.truth.oracle import Oracle
from orchestrator.driver.search.space import space_configs
from orchestrator.records import ServerConfig, TrialStatus
from orchestrator.sim.profile import load_profile

# The product's sampler uses Optuna's `group` option, which Optuna still calls experimental.
pytestmark = pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")


def test_every_strategy_starts_from_nothing() -> None:
    """Same start for all: no known-good configuration in any case's spec; specsweep launches the server
    without speculation first as it ships (its own choice, paid for like auto_benchmark's base stage)."""
    for case in CASES.values():
        spec = case_spec(case, gpus=1)
        assert spec.known_good == [] and not spec.budget.baseline
    assert VARIANTS["specsweep"].budget == {"baseline": True}


@pytest.fixture(scope="module")
def tight() -> tuple[Oracle, list[ServerConfig], float]:
    case = CASES["tight"]
    oracle = Oracle(case_spec(case, gpus=1), load_profile(case.name))
    grid = space_configs(case.space)
    best = max(oracle.evaluate(c).objective or 0.0 for c in grid)
    return oracle, grid, best


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
