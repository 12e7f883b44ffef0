"""A sweep whose time budget ends before its trial budget still confirms its answer.

Seen in the search benchmark, and what a user with `--time-budget` meets: the search ran until the
deadline, so the launches kept back for confirmation never ran (a sweep stopped by its time budget
confirms nothing) and the answer was one unconfirmed launch. The search phase now ends early enough that
the reserved confirmation launches still fit in the time budget, estimated from the launches so far.

The executor finishes each trial at once with the oracle's figures and moves the sweep's clock by the
launch's wall time, so the time budget is spent by launches, as on a node.
"""

from __future__ import annotations

import tempfile
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import pytest
from optuna.storages import InMemoryStorage

from benchmarks.search.oracle_sweep import NoTracking
from benchmarks.truth.cases import CASES, case_spec
from benchmarks.truth.oracle import Oracle
from orchestrator.driver.answer.choose import answer_launches, choose_answer
from orchestrator.driver.answer.confirm import confirmation_stop_detail, confirmations_before, time_to_confirm
from orchestrator.driver.dispatch.executor import Handle
from orchestrator.driver.loop import sweep as sweep_module
from orchestrator.driver.loop.outcome import StopReason
from orchestrator.driver.loop.sweep import Sweep
from orchestrator.driver.search.space import space_configs
from orchestrator.driver.store.study import launched_count, open_study, settled
from orchestrator.driver.store.tracking import Tracker
from orchestrator.driver.store.trial_attrs import TrialAttr
from orchestrator.records import ServerConfig, StageMetrics, TrialRecord, TrialResult, TrialStatus
from orchestrator.sim.profile import load_profile
from orchestrator.spec.search import make_config
from orchestrator.trial_events import TrialRequest
from tests.driver.loop.test_driver_decisions import InProcessExecutor

A = make_config(0.85, 64, 16, 3, 1, 4)


class ClockedExecutor(InProcessExecutor):
    """One node; a trial finishes at once, and the clock moves by its wall time (node seconds)."""

    def __init__(self, oracle: Oracle) -> None:
        super().__init__(oracle)
        self.now = 0.0
        self.started_at: list[float] = []

    def clock(self) -> float:
        return self.now

    def submit(self, request: TrialRequest, node_id: str) -> Handle:
        self.started_at.append(self.now)
        return super().submit(request, node_id)

    def result(self, handle: Handle) -> TrialResult:
        result = super().result(handle)
        self.now += result.wall_s
        return result


@pytest.fixture(scope="module")
def oracle() -> Oracle:
    case = CASES["tight"]
    return Oracle(case_spec(case, gpus=1), load_profile(case.name))


def _any_ok(oracle: Oracle) -> ServerConfig:
    return next(c for c in space_configs(CASES["tight"].space) if oracle.evaluate(c).objective)


def _sweep(
    oracle: Oracle,
    executor: ClockedExecutor,
    budget_s: float,
    monkeypatch: pytest.MonkeyPatch,
    baseline: bool = False,
) -> Sweep:
    # The driver's clock is the executor's: time passes only while a trial runs.
    monkeypatch.setattr(sweep_module, "time", SimpleNamespace(monotonic=executor.clock))
    spec = oracle.spec
    if baseline:
        spec = spec.model_copy(update={"budget": spec.budget.model_copy(update={"baseline": True})})
    study = open_study(spec, "time-budget", InMemoryStorage(), resume=False)
    sweep = Sweep(
        spec,
        study,
        cast(Tracker, NoTracking()),
        n_trials=100,  # far more than the time allows: the time budget ends the sweep
        workdir=Path(tempfile.mkdtemp(prefix="sweep-")),
        sim_profile=None,
        executor=executor,
        time_budget_s=budget_s,
        # TPE alone proposes: the proposal policy would end this search as soon as its answer is known
        # (tests/proposal/), and this is about the time budget's end
        proposals=False,
    )
    sweep.journal.folder = None
    return sweep


def test_a_sweep_ended_by_its_time_budget_still_confirms_its_answer(
    oracle: Oracle, monkeypatch: pytest.MonkeyPatch
) -> None:
    executor = ClockedExecutor(oracle)
    launch_s = oracle.evaluate(_any_ok(oracle)).seconds()
    budget_s = 16 * launch_s
    sweep = _sweep(oracle, executor, budget_s, monkeypatch)
    sweep.prepare(resume=False)
    reserved = sweep.reserve_for_confirmation()
    assert reserved == 4  # the spec's budget: the top 2 launched until each has 3 launches
    sweep.run()
    outcome = sweep.confirm_best()
    assert outcome.stop_reason is StopReason.TIME_BUDGET
    confirmations = [
        t for t in sweep.study.get_trials(deepcopy=False) if TrialAttr.CONFIRM_OF in t.user_attrs
    ]
    assert confirmations, "the time budget ended the search and no confirmation launch ran"
    # every launch started within the time budget
    assert max(executor.started_at) < budget_s
    answer = choose_answer(answer_launches(outcome.records, sweep.lossless.lossy))
    assert answer is not None and len(answer.launches) == 3  # the answer is a median of three launches


def test_without_a_time_budget_the_search_is_not_cut_short(
    oracle: Oracle, monkeypatch: pytest.MonkeyPatch
) -> None:
    executor = ClockedExecutor(oracle)
    sweep = _sweep(oracle, executor, 0.0, monkeypatch)  # 0: no time budget, as the CLI's default
    sweep.n_trials = 14
    sweep.prepare(resume=False)
    sweep.reserve_for_confirmation()
    sweep.run()
    outcome = sweep.confirm_best()
    assert outcome.stop_reason is StopReason.BUDGET_DONE
    assert len(executor.started_at) == 14


def test_the_confirmation_time_is_its_launches_at_a_full_launchs_median_wall_time() -> None:
    def rec(number: int, wall_s: float, tok_s: float | None) -> TrialRecord:
        stages = (
            (StageMetrics(8, 16, 16, 0, 2.0, tok_s, 8.0, 30.0, 60.0, 5.0, 9.0, 6.0, 2.5),) if tok_s else ()
        )
        status = TrialStatus.OK if tok_s else TrialStatus.OOM
        result = TrialResult(config=A, status=status, node_id="n", command=(), stages=stages, wall_s=wall_s)
        return TrialRecord(number=number, result=result, objective=tok_s)

    records = [rec(0, 100.0, 10.0), rec(1, 300.0, 11.0), rec(2, 200.0, 12.0), rec(3, 5.0, None)]
    assert time_to_confirm(records, 4, 1) == 4 * 200.0  # the OOM's short launch is no confirmation's
    assert time_to_confirm(records, 4, 3) == 2 * 200.0  # three nodes: two rounds
    assert time_to_confirm(records, 0, 1) is None
    assert time_to_confirm([rec(3, 5.0, None)], 4, 1) is None  # nothing measured: nothing to confirm


def test_a_time_budget_too_short_to_confirm_still_launches_speculation_after_the_baseline(
    oracle: Oracle, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seen: `--time-budget 40` ran the baseline, then stopped the search to keep 36 s for confirming,
    with nothing speculative to confirm; it answered "serve without speculation ... until the draft is
    fixed" having launched no draft at all. The reserve only ends a search that has something to confirm."""
    executor = ClockedExecutor(oracle)
    launch_s = oracle.evaluate(_any_ok(oracle)).seconds()
    sweep = _sweep(oracle, executor, 2.5 * launch_s, monkeypatch, baseline=True)
    sweep.prepare(resume=False)
    assert sweep.reserve_for_confirmation() == 4
    sweep.run()
    outcome = sweep.confirm_best()
    assert outcome.stop_reason is StopReason.TIME_BUDGET
    speculative = [r for r in outcome.records if r.result.config.speculative]
    assert speculative, [r.result.config.label() for r in outcome.records]


class SlowFirstExecutor(ClockedExecutor):
    """The first launch on a fresh node captures graphs for a new shape: twice a launch's time."""

    def result(self, handle: Handle) -> TrialResult:
        result = super().result(handle)
        if len(self.started_at) == 1:
            self.now += result.wall_s
            result = replace(result, wall_s=2 * result.wall_s)
        return result


def test_one_slow_first_launch_does_not_end_the_search_for_a_confirmation_of_itself(
    oracle: Oracle, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seen replaying the real pair's H100 grid with eight launches' time: its first launch took 252 s
    (graphs captured for a new shape) against a median of 137 s, and the reserve, four confirmation
    launches at that launch's time, ended the search after that one launch; the sweep confirmed it twice
    and answered it, 34 % below the grid's best tree. The reserve now holds what the confirmation would
    launch (one configuration measured: its two repeats), and never more than half the time budget, as
    the launch budget keeps half for the search."""
    executor = SlowFirstExecutor(oracle)
    launch_s = oracle.evaluate(_any_ok(oracle)).seconds()
    budget_s = 8 * launch_s
    sweep = _sweep(oracle, executor, budget_s, monkeypatch)
    sweep.prepare(resume=False)
    assert sweep.reserve_for_confirmation() == 4
    sweep.run()
    outcome = sweep.confirm_best()
    trials = sweep.study.get_trials(deepcopy=False)
    confirming = {t.number for t in trials if TrialAttr.CONFIRM_OF in t.user_attrs}
    searched = {r.result.config for r in outcome.records if r.number not in confirming and r.result.node_id}
    assert len(searched) >= 3, [c.label() for c in searched]
    assert confirming, "no confirmation launch ran"
    assert max(executor.started_at) < budget_s


def test_confirmation_launches_the_deadline_cut_are_said(
    oracle: Oracle, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seen with `--time-budget 60`: the search ended "so that the 3 confirmation launches (about 24 s)
    still fit", two ran, and the third stayed queued in the study with no word under the table (the
    confidence then compared the answer with a runner-up of one launch)."""
    executor = ClockedExecutor(oracle)
    launch_s = oracle.evaluate(_any_ok(oracle)).seconds()
    sweep = _sweep(oracle, executor, 16 * launch_s, monkeypatch)
    sweep.prepare(resume=False)
    assert sweep.reserve_for_confirmation() == 4
    sweep.run()
    assert sweep.deadline is not None
    sweep.deadline = executor.now + 0.5 * launch_s  # one more launch starts, then the time is up
    outcome = sweep.confirm_best()
    assert outcome.confirm_note.startswith("confirmation: "), outcome.confirm_note
    assert "did not run before the time budget ended" in outcome.confirm_note
    assert "queued: the command to continue runs" in outcome.confirm_note


def test_the_stop_line_says_how_many_confirmation_launches_can_start_before_the_deadline() -> None:
    """Seen on the real pair (`smollm2-sweep-h100-c`): at about 345 s of a 420 s budget the search ended
    "so that the 2 confirmation launches (about 203 s) still fit"; one started, and under the table the
    other "did not run before the time budget ended". A launch may start until the deadline, so of two
    launches of 101 s from 345 s only the first can."""
    assert confirmations_before(345.0, 420.0, reserve=2, each_s=101.5, slots=1) == 1
    assert confirmations_before(200.0, 420.0, reserve=2, each_s=101.5, slots=1) == 2
    assert confirmations_before(345.0, 420.0, reserve=3, each_s=101.5, slots=2) == 2  # one round of two
    assert confirmations_before(430.0, 420.0, reserve=2, each_s=101.5, slots=1) == 0
    partial = confirmation_stop_detail(345.0, 420.0, reserve=2, each_s=101.5, slots=1)
    assert partial == (
        "the search ended early for the 2 confirmation launches kept (about 102 s each): 1 can start "
        "before it, the other stays queued for --resume"
    ), partial
    whole = confirmation_stop_detail(200.0, 420.0, reserve=2, each_s=101.5, slots=1)
    assert whole == "the search ended early so that the 2 confirmation launches (about 203 s) start before it"


def test_the_stop_line_counts_the_confirmation_launches_that_then_start(
    oracle: Oracle, monkeypatch: pytest.MonkeyPatch
) -> None:
    executor = ClockedExecutor(oracle)
    launch_s = oracle.evaluate(_any_ok(oracle)).seconds()
    checked = []
    for budget in (7.3, 11.6, 16.0):
        executor.now, executor.started_at = 0.0, []
        sweep = _sweep(oracle, executor, budget * launch_s, monkeypatch)
        sweep.prepare(resume=False)
        sweep.reserve_for_confirmation()
        sweep.run()
        if not sweep.stopped_to_confirm:
            continue
        detail = sweep.outcome.stop_detail
        sweep.confirm_best()
        started = [t for t in sweep.study.get_trials(deepcopy=False) if TrialAttr.CONFIRM_OF in t.user_attrs]
        started = [t for t in started if t.state.is_finished()]
        said = (
            int(detail.split(": ")[1].split(" can start")[0])
            if " can start before it" in detail
            else int(detail.split("so that the ")[1].split(" confirmation")[0])
        )
        assert said == len(started), (budget, detail, len(started))
        checked.append(detail)
    assert checked, "no budget ended its search for a confirmation"


def test_a_search_the_time_budget_cut_is_not_finished_by_its_confirmation(
    oracle: Oracle, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seen with `--time-budget 60` on the demo: 7 of 12 trials ran, the search ended for the confirmation,
    and the confirmation, needing fewer launches than kept, settled the study: the printed "to continue:
    ... --resume" then answered "has already run 7 trials (budget 12, the last 5 launches kept for a
    confirmation that did not need them): nothing to do". The five were the search's, cut by the time
    budget; a study the time budget stopped stays open for --resume, and the note does not call it
    finished."""
    executor = ClockedExecutor(oracle)
    launch_s = oracle.evaluate(_any_ok(oracle)).seconds()
    sweep = _sweep(oracle, executor, 11.6 * launch_s, monkeypatch)
    sweep.n_trials = 30
    sweep.prepare(resume=False)
    sweep.reserve_for_confirmation()
    sweep.run()
    assert sweep.stopped_to_confirm
    outcome = sweep.confirm_best()
    assert outcome.stop_reason is StopReason.TIME_BUDGET
    assert launched_count(sweep.study) < 30
    assert not settled(sweep.study)
    assert "finished on this budget" not in outcome.confirm_note, outcome.confirm_note
