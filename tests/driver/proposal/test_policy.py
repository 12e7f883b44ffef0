"""The proposal policy in the product's own `Sweep`, on the simulated node's figures (the benchmark oracle
evaluates the simulated profile): it covers, models, races and stops when the answer is known."""

from __future__ import annotations

import random
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import cast

import pytest
from optuna.storages import InMemoryStorage

from benchmarks.launches.noisy import Launcher
from benchmarks.search.oracle_sweep import NoTracking, oracle_sweep, run_on_oracle
from benchmarks.truth.cases import CASES, case_spec
from benchmarks.truth.oracle import Oracle
from orchestrator.config.draft_tree import DraftTree
from orchestrator.driver.answer.choose import Call, answer_launches, choose_answer
from orchestrator.driver.dispatch.executor import Handle
from orchestrator.driver.loop.outcome import StopReason
from orchestrator.driver.loop.sweep import Sweep
from orchestrator.driver.proposal.policy import Action, ProposalPolicy
from orchestrator.driver.search.space import space_configs
from orchestrator.driver.store.study import launched_count, open_study
from orchestrator.driver.store.tracking import Tracker
from orchestrator.driver.store.trial_attrs import TrialAttr
from orchestrator.records import ServerConfig, TrialResult, TrialStatus
from orchestrator.sim.profile import load_profile
from orchestrator.spec.sweep_spec import SweepSpec
from tests.driver.loop.test_driver_decisions import InProcessExecutor

BUDGET = 30


class NoisyExecutor(InProcessExecutor):
    """Every launch's stages times one factor drawn per launch (a node's launch-to-launch spread)."""

    def __init__(self, oracle: Oracle, sd: float, seed: int) -> None:
        super().__init__(oracle)
        self.rng = random.Random(seed)
        self.sd = sd

    def result(self, handle: Handle) -> TrialResult:
        result = super().result(handle)
        factor = self.rng.gauss(1.0, self.sd)
        stages = tuple(replace(s, output_tok_per_s=s.output_tok_per_s * factor) for s in result.stages)
        return replace(result, stages=stages)


@pytest.fixture(scope="module")
def case() -> tuple[SweepSpec, Oracle, dict[ServerConfig, float]]:
    """One H200 with an 8B-shaped model: almost everything fits, the tree decides."""
    bench = CASES["h200-llama8b"]
    profile = load_profile(bench.name)
    spec = case_spec(bench, gpus=profile.gpu_count)
    oracle = Oracle(spec, profile)
    truth = {c: v for c in space_configs(bench.space) if (v := oracle.evaluate(c).objective) is not None}
    return spec, oracle, truth


def _run(
    spec: SweepSpec, executor: InProcessExecutor, *, proposals: bool = True, confirm: bool = False
) -> Sweep:
    study = open_study(spec, "policy", InMemoryStorage(), resume=False)
    sweep = Sweep(
        spec,
        study,
        cast(Tracker, NoTracking()),
        n_trials=BUDGET,
        workdir=Path(tempfile.mkdtemp(prefix="policy-")),
        sim_profile=None,
        executor=executor,
        proposals=proposals,
    )
    sweep.journal.folder = None
    sweep.prepare(resume=False)
    if confirm:
        sweep.reserve_for_confirmation()
    sweep.run()
    if confirm:
        sweep.confirm_best()
    return sweep


def _answer(sweep: Sweep) -> ServerConfig:
    answer = choose_answer(answer_launches(sweep.outcome.records))
    assert answer is not None
    return next(r.result.config for r in sweep.outcome.records if r.number == answer.representative)


def test_the_sweep_stops_early_when_the_answer_is_clear(
    case: tuple[SweepSpec, Oracle, dict[ServerConfig, float]],
) -> None:
    spec, oracle, truth = case
    sweep = _run(spec, InProcessExecutor(oracle))
    outcome = sweep.outcome
    assert outcome.stop_reason is StopReason.ANSWER_KNOWN
    # Which stop: the judge's clear call, in its words, not the race run out and still too close (the
    # noiseless oracle's repeats agree exactly, so the call is clear as soon as the study pools a spread).
    answer = choose_answer(answer_launches(outcome.records))
    assert answer is not None and answer.verdict.call is Call.CLEARLY_AHEAD
    assert outcome.stop_detail.startswith(f"the answer is known: {answer.verdict.statement}")
    assert "as well as it matters" not in outcome.stop_detail and "given back" in outcome.stop_detail
    # After how many launches: no launch is raced once the records so far call the leader clearly
    # ahead, so the leader stops short of the race's launches and every launch was a record's.
    confirming = _confirmations(sweep)
    for k in range(1, len(outcome.records)):
        so_far = choose_answer(answer_launches(outcome.records[:k]))
        if so_far is not None and so_far.verdict.call is Call.CLEARLY_AHEAD:
            assert outcome.records[k].number not in confirming, (k, so_far.verdict.statement)
    assert confirming and len(answer.launches) < ProposalPolicy(spec).race_launches
    launched = launched_count(sweep.study)
    assert launched == len(outcome.records) < BUDGET // 2
    assert truth[_answer(sweep)] >= 0.98 * max(truth.values())
    first = [DraftTree.of(r.result.config) for r in outcome.records[:3]]
    assert len(set(first)) == 3  # coverage: three different trees first
    assert all(r.result.status is TrialStatus.OK for r in outcome.records)  # structure first: no OOM


def test_without_the_policy_the_whole_budget_is_spent(
    case: tuple[SweepSpec, Oracle, dict[ServerConfig, float]],
) -> None:
    spec, oracle, _ = case
    sweep = _run(spec, InProcessExecutor(oracle), proposals=False)
    assert sweep.outcome.stop_reason is StopReason.BUDGET_DONE
    assert launched_count(sweep.study) == BUDGET


def test_a_close_race_is_run_again_before_the_stop(
    case: tuple[SweepSpec, Oracle, dict[ServerConfig, float]],
) -> None:
    """With a few percent of launch-to-launch noise the top trees cannot be told apart by one launch each:
    the policy launches the close ones again (marked as confirmations) before it calls the answer."""
    spec, oracle, truth = case
    sweep = _run(spec, NoisyExecutor(oracle, sd=0.02, seed=3))
    raced = [t for t in sweep.study.get_trials(deepcopy=False) if TrialAttr.CONFIRM_OF in t.user_attrs]
    assert raced
    answer = choose_answer(answer_launches(sweep.outcome.records))
    assert answer is not None and len(answer.launches) >= 2
    assert truth[_answer(sweep)] >= 0.97 * max(truth.values())


def test_the_confirmation_still_runs_after_an_early_stop(
    case: tuple[SweepSpec, Oracle, dict[ServerConfig, float]],
) -> None:
    spec, oracle, _ = case
    sweep = _run(spec, InProcessExecutor(oracle), confirm=True)
    assert sweep.outcome.stop_reason is StopReason.ANSWER_KNOWN
    answer = choose_answer(answer_launches(sweep.outcome.records))
    assert answer is not None and len(answer.launches) >= spec.budget.confirm_repeats


def test_on_the_benchmark_the_policy_launches_nothing_that_cannot_fit() -> None:
    """The product as shipped, driven by the search benchmark on the tight 20 GB card with a real node's
    noise: every launch starts and serves (structure first), and a configuration is launched twice only
    as a race or confirmation launch."""
    bench = CASES["tight"]
    profile = load_profile(bench.name)
    oracle = Oracle(case_spec(bench, gpus=profile.gpu_count), profile)
    launcher = Launcher(oracle, 0, budget_gpu_s=40 * 170.0, max_launches=20)
    sweep = oracle_sweep(oracle.spec, launcher)
    records = run_on_oracle(sweep)
    launched = [r for r in records if r.result.node_id]
    assert launched and all(r.result.status is TrialStatus.OK for r in launched)
    confirming = {t.number for t in sweep.study.get_trials() if TrialAttr.CONFIRM_OF in t.user_attrs}
    firsts = [r.result.config for r in launched if r.number not in confirming]
    assert len(firsts) == len(set(firsts))


def test_the_stop_waits_for_the_race_and_follows_the_judge(
    case: tuple[SweepSpec, Oracle, dict[ServerConfig, float]],
) -> None:
    """The decision itself, on the records of a sweep that stopped: with every launch it says stop (the
    leader is separated and no untried tree can beat it); without the leader's repeat, the leader alone
    against its runner-up is too close on the noise prior, so it asks for that repeat first."""
    spec, oracle, _ = case
    sweep = _run(spec, InProcessExecutor(oracle))
    records = sweep.outcome.records
    policy = ProposalPolicy(spec)
    assert policy.decide(records, [], sweep.memory_model).action is Action.STOP
    repeats = [r for r in records if r.number in _confirmations(sweep)]
    assert repeats
    before = [r for r in records if r.number < repeats[0].number]
    again = policy.decide(before, [], sweep.memory_model)
    assert again.action is Action.PROPOSE and TrialAttr.CONFIRM_OF in again.attrs
    assert again.config == repeats[0].result.config


def _confirmations(sweep: Sweep) -> set[int]:
    return {t.number for t in sweep.study.get_trials() if TrialAttr.CONFIRM_OF in t.user_attrs}
