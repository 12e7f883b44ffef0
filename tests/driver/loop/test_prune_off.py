"""`budget.prune: false` measures every stage of every launch: a grid that is the truth of a pair (every
tree at every concurrency) must not lose its high-concurrency figures to the pruner, and a user who reads
the answer per level needs each level measured."""

from __future__ import annotations

import statistics

import pytest

from benchmarks.launches.noisy import Launcher
from benchmarks.search.oracle_sweep import oracle_sweep, run_on_oracle
from benchmarks.truth.cases import CASES, case_spec
from benchmarks.truth.oracle import Oracle
from orchestrator.driver.search.space import space_configs
from orchestrator.mlflow_schema import Tag
from orchestrator.records import TrialRecord
from orchestrator.sim.profile import load_profile
from orchestrator.spec.sweep_spec import SweepSpec

pytestmark = pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")


def _spec(prune: bool) -> SweepSpec:
    """The tight case at three levels (the pruner waits for two stages) with `budget.prune` as given,
    validated as a spec file is."""
    data = case_spec(CASES["tight"], gpus=1).model_dump(mode="json")
    data["workload"]["concurrency"] = [1, 8, 32]
    data["budget"]["prune"] = prune
    return SweepSpec.model_validate(data)


def _records(prune: bool, seed: int) -> list[TrialRecord]:
    case = CASES["tight"]
    spec = _spec(prune)
    oracle = Oracle(spec, load_profile(case.name))
    typical = statistics.median(
        e.seconds() for c in space_configs(case.space) if (e := oracle.evaluate(c)).objective is not None
    )
    launcher = Launcher(oracle, seed, budget_gpu_s=20 * typical, max_launches=20)
    return run_on_oracle(oracle_sweep(spec, launcher))


def test_the_pruner_stops_weak_launches_by_default_and_none_with_prune_off() -> None:
    stages = 3
    pruned = [r for r in _records(True, 0) if r.tag(Tag.PRUNED_AT_STAGE) is not None]
    assert pruned, "the default sweep prunes some weak launch (else this test proves nothing)"
    kept = [r for r in _records(False, 0) if r.result.node_id and r.result.stages]
    assert len(kept) > len(pruned)
    assert all(r.tag(Tag.PRUNED_AT_STAGE) is None for r in kept)
    assert all(len(r.result.stages) == stages for r in kept)
