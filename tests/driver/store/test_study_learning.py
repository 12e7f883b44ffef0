"""The sampler learns the OOM boundary from PRUNED trials with a violated constraint.

A pure Optuna test of our tell logic and search space: the "server" is a rule (too little memory
fraction for the captured graphs = OOM), so it runs in a second and can fail on a real bug in
`tell_outcome` or `suggest_config` (telling OOMs as FAIL, for one, makes this test fail).
"""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from orchestrator.driver.search.space import suggest_config
from orchestrator.driver.store.study import open_study, tell_outcome
from orchestrator.records import ServerConfig, TrialStatus
from orchestrator.spec.sweep_spec import load_spec

DEMO = Path(__file__).resolve().parents[3] / "trials" / "demo.yaml"


def ooms(c: ServerConfig) -> bool:
    return c.mem_fraction_static < 0.80 + c.cuda_graph_max_bs / 512 * 0.08


def tok_s(c: ServerConfig) -> float:
    return 1000 * c.max_running_requests / 64 + 300 * (c.speculative_num_steps or 0) - c.cuda_graph_max_bs / 4


def run(sampler: optuna.samplers.BaseSampler | None, n: int, seed: int = 0) -> int:
    spec = load_spec(DEMO).model_copy(update={"sampler_seed": seed})
    if sampler is None:
        study = open_study(spec, "learn", "sqlite:///:memory:", resume=False)
    else:
        study = optuna.create_study(direction="maximize", sampler=sampler)
    inside = 0
    for i in range(n):
        trial = study.ask()
        config = suggest_config(trial, spec.search)
        bad = ooms(config)
        if i >= 10 and bad:
            inside += 1
        status = TrialStatus.OOM if bad else TrialStatus.OK
        tell_outcome(study, trial, status, None if bad else tok_s(config), pruned=False)
    return inside


@pytest.mark.slow  # many TPE studies side by side
def test_tpe_with_constraint_avoids_the_oom_region_more_than_random() -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    n = 50
    ours = sum(run(None, n, seed=s) for s in range(3)) / 3
    random = sum(run(optuna.samplers.RandomSampler(seed=s), n) for s in range(3)) / 3
    assert ours < 0.7 * random, (ours, random)


def test_pruner_cuts_only_the_clearly_worse_and_never_after_the_last_stage() -> None:
    spec = load_spec(DEMO)
    study = open_study(spec, "prune", "sqlite:///:memory:", resume=False)
    for base in (100.0, 110.0, 120.0, 130.0, 140.0):
        t = study.ask()
        for step in range(3):
            t.report(base * (step + 1), step)
        study.tell(t, base * 3)

    def prunes(value: float, step: int) -> bool:
        t = study.ask()
        for s in range(step):
            t.report(value, s)
        t.report(value, step)
        verdict = t.should_prune()
        study.tell(t, state=optuna.trial.TrialState.FAIL)
        return verdict

    assert prunes(50.0, 1)  # far below every other trial at the same stage
    assert not prunes(225.0, 1)  # in the middle of the pack: keep measuring
    assert not prunes(1.0, 0)  # the first stage alone is not enough to judge


def test_each_outcome_is_told_with_its_state_and_constraints() -> None:
    """What the sampler is told: the state and the constraint values it learns from, per outcome."""
    import pytest

    from orchestrator.driver.store.optuna_tell import OOM_CONSTRAINT, SLA_CONSTRAINT

    study = optuna.create_study(direction="maximize")
    cases = [
        (TrialStatus.OOM, 900.0, False, "PRUNED", {OOM_CONSTRAINT: 1.0}),
        (TrialStatus.OOM_UNDER_LOAD, None, False, "PRUNED", {OOM_CONSTRAINT: 1.0}),
        (TrialStatus.PREDICTED_OOM, None, False, "PRUNED", {OOM_CONSTRAINT: 1.0}),
        (TrialStatus.KV_PRESSURE, None, False, "PRUNED", {OOM_CONSTRAINT: 1.0}),
        # Ran, met no latency limit: infeasible through its own constraint, not a fake value of 0.
        (TrialStatus.SLA_MISSED, None, False, "PRUNED", {OOM_CONSTRAINT: 0.0, SLA_CONSTRAINT: 1.0}),
        (TrialStatus.OK, 1234.0, False, "COMPLETE", {OOM_CONSTRAINT: 0.0, SLA_CONSTRAINT: 0.0}),
        (TrialStatus.OK, 1234.0, True, "PRUNED", {OOM_CONSTRAINT: 0.0, SLA_CONSTRAINT: 0.0}),
        (TrialStatus.FAILED, None, False, "FAIL", {}),
        (TrialStatus.TIMEOUT, None, False, "FAIL", {}),
        (TrialStatus.LOST, None, False, "FAIL", {}),
    ]
    for status, value, pruned, state, constraints in cases:
        trial = study.ask()
        tell_outcome(study, trial, status, value, pruned=pruned)
        told = study.trials[trial.number]
        assert told.state.name == state, status
        assert told.constraints == constraints, status
        if state == "COMPLETE":
            assert told.value == pytest.approx(value)
