"""The race and the stop, decided by the product's policy on the records of launches: a close race
relaunches the runner-up and not only the leader; a race still too close stops once the noise left is at
most `CLOSE_ENOUGH` and goes on above it; a leader clearly ahead stops at once, by the judge's call.

The records are those of a sweep on a space of three trees (every tree measured, so the model has no
untried tree to propose and the decision is the race's or the stop's), launched again with the figures
each case needs: the launch-to-launch spread the study pools is what the cases set."""

from __future__ import annotations

from dataclasses import replace

import pytest

from benchmarks.truth.cases import CASES, case_spec
from benchmarks.truth.oracle import Oracle
from orchestrator.config.draft_tree import DraftTree
from orchestrator.driver.answer.choose import Call, Verdict, answer_launches, baseline_launches, choose_answer
from orchestrator.driver.answer.noise import NoiseSource
from orchestrator.driver.loop.sweep import Sweep
from orchestrator.driver.proposal.policy import CLOSE_ENOUGH, Action, ProposalPolicy
from orchestrator.driver.store.trial_attrs import TrialAttr
from orchestrator.records import TrialRecord
from orchestrator.sim.profile import load_profile
from orchestrator.spec.search import Choices, IntRange, make_config
from orchestrator.spec.sweep_spec import SweepSpec
from tests.driver.loop.test_driver_decisions import InProcessExecutor
from tests.driver.proposal.test_policy import _run


@pytest.fixture(scope="module")
def three_trees() -> tuple[SweepSpec, Sweep, list[TrialRecord]]:
    """The 8B shape on one H200 with the chains of 2, 3 and 4 steps only; the first launch of each tree,
    best first (on the simulated profile: s4k1d5, then s3k1d4 1.0 % behind, then s2k1d3 7 % behind)."""
    bench = CASES["h200-llama8b"]
    profile = load_profile(bench.name)
    spec = case_spec(bench, gpus=profile.gpu_count)
    search = spec.search.model_copy(
        update={
            "speculative_num_steps": IntRange(low=2, high=4),
            "speculative_eagle_topk": Choices(choices=[1]),
        }
    )
    spec = spec.model_copy(update={"search": search})
    sweep = _run(spec, InProcessExecutor(Oracle(spec, profile)))
    firsts: dict[DraftTree | None, TrialRecord] = {}
    for r in sweep.outcome.records:
        firsts.setdefault(DraftTree.of(r.result.config), r)
    ranked = sorted(firsts.values(), key=lambda r: -(r.objective or 0.0))
    assert len(ranked) == 3 and None not in firsts
    return spec, sweep, ranked


def again(record: TrialRecord, number: int, factor: float) -> TrialRecord:
    """Another launch of the record's configuration whose stages measured ``factor`` times its figures."""
    stages = tuple(replace(s, output_tok_per_s=s.output_tok_per_s * factor) for s in record.result.stages)
    objective = None if record.objective is None else record.objective * factor
    return replace(record, number=number, objective=objective, result=replace(record.result, stages=stages))


def launches(
    leader: TrialRecord, runner: TrialRecord, third: TrialRecord, spread: float
) -> list[TrialRecord]:
    """The leader and the runner-up launched three times each (figures at 1, 1 + spread and 1 - spread of
    their first: a pooled launch-to-launch spread of ``spread``), the third tree once."""
    records = [leader, runner, third]
    for factor in (1 + spread, 1 - spread):
        records += [again(leader, len(records), factor), again(runner, len(records) + 1, factor)]
    return records


def verdict(records: list[TrialRecord]) -> Verdict:
    answer = choose_answer(answer_launches(records))
    assert answer is not None
    return answer.verdict


def test_a_close_race_relaunches_the_runner_up_once_the_leader_has_been_launched_again(
    three_trees: tuple[SweepSpec, Sweep, list[TrialRecord]],
) -> None:
    """Leader launched twice, runner-up once, too close to call on the noise prior: the next launch is
    the runner-up's, the least-launched of the two (racing only the leader would never tell them apart)."""
    spec, sweep, (leader, runner, third) = three_trees
    records = [leader, runner, third, again(leader, 3, 1.0)]
    call = verdict(records)
    assert call.call is Call.TOO_CLOSE and runner.number in call.too_close_with
    decision = ProposalPolicy(spec, race_launches=3).decide(records, [], sweep.memory_model)
    assert decision.action is Action.PROPOSE, decision
    assert decision.attrs == {TrialAttr.CONFIRM_OF: runner.number}
    assert decision.config == runner.result.config != leader.result.config
    assert decision.why == f"race: trial {runner.number}'s configuration again (2 launches)"


def test_a_race_still_too_close_stops_once_the_noise_left_is_within_close_enough(
    three_trees: tuple[SweepSpec, Sweep, list[TrialRecord]],
) -> None:
    """Three launches each, 0.6 % launch to launch: the 1.0 % lead is within the 1.4 % of gap noise, too
    close to call, and what is left between them is below the 2 % a user can tell: the race is over."""
    spec, sweep, (leader, runner, third) = three_trees
    records = launches(leader, runner, third, 0.006)
    call = verdict(records)
    assert call.call is Call.TOO_CLOSE and call.noise is not None and 0.01 < call.noise <= CLOSE_ENOUGH
    decision = ProposalPolicy(spec, race_launches=3).decide(records, [], sweep.memory_model)
    assert decision.action is Action.STOP, decision
    assert decision.why == (
        f"the answer is known as well as it matters: {call.statement}; what is left between them is below 2 %"
    )


def test_a_race_still_too_close_goes_on_while_the_noise_left_is_above_close_enough(
    three_trees: tuple[SweepSpec, Sweep, list[TrialRecord]],
) -> None:
    """The same race at 1.5 % launch to launch: 3.4 % of gap noise, above the 2 %: it was run out
    (three launches each) but more launches can still separate them, so the leader is launched again."""
    spec, sweep, (leader, runner, third) = three_trees
    records = launches(leader, runner, third, 0.015)
    call = verdict(records)
    assert call.call is Call.TOO_CLOSE and call.noise is not None and CLOSE_ENOUGH < call.noise < 0.05
    decision = ProposalPolicy(spec, race_launches=3).decide(records, [], sweep.memory_model)
    assert decision.action is Action.PROPOSE, decision
    assert decision.attrs == {TrialAttr.CONFIRM_OF: leader.number}
    assert decision.config == leader.result.config


def test_a_leader_clearly_ahead_stops_the_sweep_before_the_race_is_run_out(
    three_trees: tuple[SweepSpec, Sweep, list[TrialRecord]],
) -> None:
    """Two launches each of the leader and the runner-up that agree to the last digit: the 1.0 % lead is
    clearly ahead of no noise. The stop is the judge's call, said in its words, at 2 launches of the
    leader, fewer than the race's 3: a clear call does not wait for the race."""
    spec, sweep, (leader, runner, third) = three_trees
    records = [leader, runner, third, again(leader, 3, 1.0), again(runner, 4, 1.0)]
    call = verdict(records)
    assert call.call is Call.CLEARLY_AHEAD
    decision = ProposalPolicy(spec, race_launches=3).decide(records, [], sweep.memory_model)
    assert decision.action is Action.STOP, decision
    assert decision.why == f"the answer is known: {call.statement}"
    assert "as well as it matters" not in decision.why


def test_a_lead_called_clear_on_the_noise_prior_alone_is_raced_until_the_study_measures_its_spread(
    three_trees: tuple[SweepSpec, Sweep, list[TrialRecord]],
) -> None:
    """One launch of each tree: the leader's 6 % lead is clear against the GPU-bound prior (0.7 % launch to
    launch), but a prior is what a node of this kind usually does, not what this one did: a node whose
    launches move by 7 % would make that lead noise. So the sweep does not stop on it: it launches the
    leader again, then the runner-up, until its own repeats give a spread; with that spread measured (and
    as large as the overhead-bound one) the same lead is too close and the race goes on."""
    spec, sweep, (leader, runner, third) = three_trees
    policy = ProposalPolicy(spec, race_launches=3)
    leader = again(leader, leader.number, 1.05)  # 6 % ahead: clear against 3.4 % of prior gap noise
    records = [leader, runner, third]
    call = verdict(records)
    assert call.call is Call.CLEARLY_AHEAD and call.noise_source is NoiseSource.PRIOR
    decision = policy.decide(records, [], sweep.memory_model)
    assert decision.action is Action.PROPOSE, decision
    assert decision.attrs == {TrialAttr.CONFIRM_OF: leader.number}
    assert decision.why.startswith(f"measure the noise: trial {leader.number}'s configuration again")
    records.append(again(leader, 3, 1.0))
    decision = policy.decide(records, [], sweep.memory_model)
    assert decision.action is Action.PROPOSE and decision.attrs == {TrialAttr.CONFIRM_OF: runner.number}
    # The repeats measured 7 % launch to launch: the lead the prior called clear is too close now.
    records = [leader, runner, third, again(leader, 3, 1.07), again(runner, 4, 0.93)]
    call = verdict(records)
    assert call.noise_source is NoiseSource.POOLED and call.call is Call.TOO_CLOSE
    decision = policy.decide(records, [], sweep.memory_model)
    assert decision.action is Action.PROPOSE and TrialAttr.CONFIRM_OF in decision.attrs


def _baseline(record: TrialRecord, number: int, factor: float) -> TrialRecord:
    """The server without speculation at the record's memory flags, measuring ``factor`` times its figure."""
    c = record.result.config
    nospec = make_config(c.mem_fraction_static, c.cuda_graph_max_bs, c.max_running_requests)
    launch = again(record, number, factor)
    return replace(launch, baseline=True, result=replace(launch.result, config=nospec))


def test_a_baseline_within_the_noise_of_the_leader_joins_the_race_and_its_repeat_is_a_baseline(
    three_trees: tuple[SweepSpec, Sweep, list[TrialRecord]],
) -> None:
    """The leader and the runner-up raced to three launches each at 1.5 % launch to launch; the server
    without speculation launched once, 0.5 % behind the leader: within the noise, so it is the
    least-launched of the race and is launched again, as the baseline (its repeat is paid for)."""
    spec, sweep, (leader, runner, third) = three_trees
    records = launches(leader, runner, third, 0.015)
    base = _baseline(leader, len(records), 0.995)
    records.append(base)
    full = choose_answer(answer_launches(records), baseline_launches(records))
    assert full is not None and not full.nospec and full.versus_nospec is not None
    assert full.versus_nospec.call is Call.TOO_CLOSE
    decision = ProposalPolicy(spec, race_launches=3).decide(records, [], sweep.memory_model)
    assert decision.action is Action.PROPOSE, decision
    assert decision.attrs == {TrialAttr.CONFIRM_OF: base.number, TrialAttr.BASELINE: True}
    assert decision.config == base.result.config and not base.result.config.speculative
    assert decision.why == f"race: trial {base.number}'s configuration again (2 launches)"
    # Far behind, it is not raced: the race is the speculative one's alone, as before.
    far = [*records[:-1], _baseline(leader, base.number, 0.5)]
    decision = ProposalPolicy(spec, race_launches=3).decide(far, [], sweep.memory_model)
    assert decision.attrs == {TrialAttr.CONFIRM_OF: leader.number}


def test_a_leader_clearly_ahead_of_the_speculative_runner_up_still_races_a_close_baseline(
    three_trees: tuple[SweepSpec, Sweep, list[TrialRecord]],
) -> None:
    """The speculative call is clear (the leader three launches at 1.5 % launch to launch, 7 % ahead of
    the next tree's three and 10 % of the last one's one), but the server without speculation, measured
    once 0.2 % ahead of the leader, has not been told apart from it: no stop yet, the baseline again."""
    spec, sweep, (leader, runner, third) = three_trees
    records = [leader, again(runner, 1, 0.9), third]
    for factor in (1.015, 0.985):
        records += [again(leader, len(records), factor), again(third, len(records) + 1, factor)]
    assert verdict(records).call is Call.CLEARLY_AHEAD
    assert ProposalPolicy(spec, race_launches=3).decide(records, [], sweep.memory_model).action is Action.STOP
    base = _baseline(leader, len(records), 1.002)
    records.append(base)
    full = choose_answer(answer_launches(records), baseline_launches(records))
    assert full is not None and full.nospec and full.verdict.call is Call.TOO_CLOSE
    decision = ProposalPolicy(spec, race_launches=3).decide(records, [], sweep.memory_model)
    assert decision.action is Action.PROPOSE, decision
    assert decision.attrs == {TrialAttr.CONFIRM_OF: base.number, TrialAttr.BASELINE: True}
