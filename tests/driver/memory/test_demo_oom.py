"""trials/demo-oom.yaml, the demo with the memory prior off: the OOM path a newcomer can watch.

`trials/demo.yaml` launches nothing that cannot fit (its prior refuses it first), so its feasibility map
has no OOM point. This spec learns from launches only: its run must show start-up OOMs of both kinds
launched, told to Optuna as pruned, and learned (nothing the learned model rules out is launched again),
on the demo's own simulated node, in process.
"""

from __future__ import annotations

import math
from pathlib import Path

import optuna

from benchmarks.launches.noisy import Launcher
from benchmarks.search.oracle_sweep import oracle_sweep, run_on_oracle
from benchmarks.truth.oracle import Oracle
from orchestrator.config.draft_tree import DraftTree
from orchestrator.records import FailureStage, TrialRecord, TrialStatus
from orchestrator.sim.profile import load_profile
from orchestrator.spec.sweep_spec import load_spec

ROOT = Path(__file__).resolve().parents[3]
SPEC = ROOT / "trials" / "demo-oom.yaml"


def _run() -> tuple[list[TrialRecord], optuna.Study]:
    spec = load_spec(SPEC)
    assert not spec.memory.prior and spec.name == "demo-oom"
    assert spec.simulated is not None and isinstance(spec.simulated.profile, str)
    oracle = Oracle(spec, load_profile(spec.simulated.profile))
    trials = spec.budget.trials
    launcher = Launcher(oracle, seed=0, budget_gpu_s=math.inf, max_launches=trials + 2)
    sweep = oracle_sweep(spec, launcher, n_trials=trials)
    return run_on_oracle(sweep), sweep.study


def test_the_oom_demo_launches_start_up_ooms_of_both_kinds_and_learns_from_them() -> None:
    records, study = _run()
    ooms = [r for r in records if r.result.status is TrialStatus.OOM]
    stages = {r.result.failure.stage for r in ooms if r.result.failure is not None}
    assert FailureStage.KV_ALLOCATION in stages
    assert stages & {FailureStage.DRAFT_GRAPH_CAPTURE, FailureStage.TARGET_GRAPH_CAPTURE}
    # told to Optuna as pruned with the `oom` constraint violated (TPE reads it)
    by_number = {t.number: t for t in study.trials}
    for r in ooms:
        told = by_number[r.number]
        assert told.state is optuna.trial.TrialState.PRUNED
        assert told.system_attrs.get("constraints:oom", 0.0) > 0, told.system_attrs
    kv_floor = max(
        r.result.config.mem_fraction_static
        for r in ooms
        if r.result.failure is not None and r.result.failure.stage is FailureStage.KV_ALLOCATION
    )
    served = [r for r in records if r.result.status is TrialStatus.OK]
    # Learned, not retried: nothing at or below the fraction that left no KV cache is launched again,
    # and a tree whose graphs did not fit is served later at a fraction that leaves them room.
    assert all(r.result.config.mem_fraction_static > kv_floor for r in records if r.number > ooms[0].number)
    graph_oom = next(
        r for r in ooms if r.result.failure and r.result.failure.stage is not FailureStage.KV_ALLOCATION
    )
    tree = DraftTree.of(graph_oom.result.config)
    assert any(
        DraftTree.of(r.result.config) == tree
        and r.result.config.mem_fraction_static < graph_oom.result.config.mem_fraction_static
        for r in served
    )
    # The whole budget is spent, with the confirmation: a run of a few minutes that ends with an answer.
    assert sum(1 for r in records if r.result.node_id) >= load_spec(SPEC).budget.trials
