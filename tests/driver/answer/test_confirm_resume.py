"""A sweep stopped during its search (Ctrl-C) and resumed keeps its confirmation.

Seen on a fresh clone: the demo (12 launches, 4 kept to confirm the best 2) stopped with Ctrl-C after 5,
then `--resume`: "no confirmation launches: the 7 trial(s) left cannot spare 4 ... and keep half for the
search", so the resumed sweep searched 7 more and answered with one unconfirmed launch. Half is the
study's budget's half, what the first invocation kept: the search's launches already made count toward it.
"""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
from optuna.storages import InMemoryStorage

from benchmarks.truth.cases import CASES, case_spec
from benchmarks.truth.oracle import Oracle
from orchestrator.driver.answer.conclusion import sweep_answer
from orchestrator.driver.answer.confirm import confirmation_line, confirmation_note, reserved_launches
from orchestrator.driver.console.study_guard import StudyRefused, check_study
from orchestrator.driver.loop.sweep import Sweep
from orchestrator.driver.store.study import launched_count, open_study
from orchestrator.driver.store.trial_attrs import StudyAttr, TrialAttr
from orchestrator.sim.profile import load_profile
from orchestrator.spec.sweep_spec import BudgetSpec
from tests.driver.loop.test_driver_decisions import InProcessExecutor
from tests.driver.loop.test_driver_decisions import _sweep as in_process_sweep


@pytest.fixture(scope="module")
def oracle() -> Oracle:
    case = CASES["tight"]
    return Oracle(case_spec(case, gpus=1), load_profile(case.name))


def _sweep(oracle: Oracle, study: optuna.Study, n_trials: int, resume: bool) -> Sweep:
    sweep = in_process_sweep(oracle.spec, study, InProcessExecutor(oracle), n_trials, proposals=False)
    sweep.journal.folder = None
    sweep.prepare(resume=resume)
    return sweep


def test_a_sweep_stopped_during_its_search_confirms_when_resumed(oracle: Oracle) -> None:
    storage = InMemoryStorage()
    study = open_study(oracle.spec, "ctrl-c", storage, resume=False)
    first = _sweep(oracle, study, 12, resume=False)
    assert first.reserve_for_confirmation() == 4  # the tight case: the best 2 until each has 3 launches
    first.n_trials = 5  # stopped after 5 of its 8 search launches
    first.run()
    assert launched_count(study) == 5

    again = _sweep(oracle, open_study(oracle.spec, "ctrl-c", storage, resume=True), 12, resume=True)
    assert again.remaining() == 7
    assert again.reserve_for_confirmation() == 4  # as the first invocation kept
    again.run()
    again.confirm_best()
    confirmations = [
        t for t in again.study.get_trials(deepcopy=False) if TrialAttr.CONFIRM_OF in t.user_attrs
    ]
    assert len(confirmations) == 4 and launched_count(again.study) == 12


def test_the_reserve_of_a_resumed_study_counts_its_search_and_what_is_left() -> None:
    budget = case_spec(CASES["tight"], gpus=1).budget  # confirm_top 2, confirm_repeats 3: 4 launches
    assert reserved_launches(budget, 12) == 4  # a fresh sweep of 12
    assert reserved_launches(budget, 12, left=7) == 4  # 5 searched, 7 left
    assert reserved_launches(budget, 12, left=2) == 2  # stopped during its confirmation: what is left
    assert reserved_launches(budget, 7) == 0  # too small a budget to confirm and keep half for the search
    assert confirmation_note(budget, 7) != ""
    # resumed, 5 searched: 7 left of a budget of 12 confirms; the note has nothing to say
    assert confirmation_note(budget, 7, spent=5) == ""


def test_the_reserve_is_said_in_a_sentence() -> None:
    """Seen at every start: "4 of the 12 launches left kept to relaunch the best 2 configuration(s) (3
    launches each)", a line that does not parse, and where 2 x 3 is not 4."""
    budget = BudgetSpec(trials=12, confirm_top=2, confirm_repeats=3)
    assert confirmation_line(budget, 4, 12) == (
        "confirmation: 4 of the 12 launches left are kept to relaunch the best 2 configurations until each "
        "has 3 launches"
    )
    one = BudgetSpec(trials=8, confirm_top=1, confirm_repeats=2)
    assert confirmation_line(one, 1, 8) == (
        "confirmation: 1 of the 8 launches left is kept to relaunch the best configuration until it has 2 "
        "launches"
    )


def test_a_resumed_start_says_what_the_best_so_far_already_have() -> None:
    """Seen on the demo's `--resume --trials 24`: "4 of the 12 launches left are kept to relaunch the best 2
    configurations until each has 3 launches" where both had 3, and at the end "4 of the launches kept for
    it were not needed": the start says what the best so far need, and where the rest goes."""
    budget = BudgetSpec(trials=12, confirm_top=2, confirm_repeats=3)
    assert confirmation_line(budget, 4, 12, needed=0) == (
        "confirmation: 4 of the 12 launches left are kept for the end, though the best 2 configurations "
        "so far already have 3 launches each: what a new leader would not need then goes back to the search"
    )
    assert confirmation_line(budget, 4, 12, needed=2) == (
        "confirmation: 4 of the 12 launches left are kept to relaunch the best 2 configurations until each "
        "has 3 launches (2 needed by the best so far; what a new leader would not need then goes back to "
        "the search)"
    )
    assert confirmation_line(budget, 4, 12, needed=4) == confirmation_line(budget, 4, 12)


def test_a_resumed_sweep_knows_what_its_best_configurations_still_need(
    oracle: Oracle, tmp_path: Path
) -> None:
    storage = InMemoryStorage()

    def sweep(n_trials: int, resume: bool) -> Sweep:
        study = open_study(oracle.spec, "needed", storage, resume=resume)
        made = in_process_sweep(oracle.spec, study, InProcessExecutor(oracle), n_trials, tmp_path, False)
        made.prepare(resume=resume)
        return made

    first = sweep(12, resume=False)
    assert first.confirmation_needed() is None  # nothing measured: a fresh sweep says the budget's plan
    first.reserve_for_confirmation()
    first.run()
    first.confirm_best()
    again = sweep(24, resume=True)
    assert again.outcome.records, "the resumed sweep has the first one's records"
    assert again.confirmation_needed() == 0  # the best 2 have their 3 launches each


def test_a_budget_given_by_flag_is_raised_by_the_flag() -> None:
    """Seen: `--trials 3` printed "raise budget.trials to 8", a key the run did not read (the flag
    overrides it)."""
    budget = BudgetSpec(trials=12, confirm_top=2, confirm_repeats=3)
    assert confirmation_note(budget, 3).endswith("raise budget.trials to 8 or lower budget.confirm_top")
    assert confirmation_note(budget, 3, by_flag=True).endswith(
        "raise --trials to 8 or lower budget.confirm_top"
    )


def test_launches_kept_for_a_confirmation_that_needs_none_settle_the_study(
    oracle: Oracle, tmp_path: Path
) -> None:
    """The race had already repeated the answer, so the launch kept to confirm it was not needed. The study
    once ended one launch short of its budget, unfinished: every later --resume started Ray, said
    "confirmation: 1 of the 1 launches left is kept", launched nothing and answered again. The unneeded
    launch is said, and the study is finished on that budget (a larger --trials still runs more)."""
    url = f"sqlite:///{tmp_path / 'optuna.db'}"
    spec = oracle.spec.model_copy(update={"budget": BudgetSpec(trials=7, confirm_top=1, confirm_repeats=2)})
    study = open_study(spec, "settled", url, resume=False)
    study.set_user_attr(StudyAttr.BUDGET_TRIALS, 7)
    sweep = in_process_sweep(spec, study, InProcessExecutor(oracle), 7, proposals=False)
    sweep.journal.folder = None
    sweep.prepare(resume=False)
    assert sweep.reserve_for_confirmation() == 1
    sweep.n_trials = 5
    sweep.run()
    answer = sweep_answer(sweep.outcome.records)
    assert answer is not None
    first = answer.launches[0]
    params = next(t.params for t in study.get_trials(deepcopy=False) if t.number == first)
    study.enqueue_trial(dict(params), user_attrs={TrialAttr.CONFIRM_OF: first})  # the race's repeat
    sweep.n_trials = 6
    sweep.run()
    outcome = sweep.confirm_best()
    assert launched_count(study) == 6
    assert outcome.confirm_note.startswith("confirmation: 1 of the launches kept for it was not needed")
    assert check_study(url, "settled", True, 7, tmp_path / "settled") is not None  # finished: nothing to run
    said = check_study(url, "settled", True, 7, tmp_path / "settled")
    assert (
        said is not None and "budget 7, the last launch kept for a confirmation that did not need it" in said
    )
    assert check_study(url, "settled", True, 9, tmp_path / "settled") is None  # more trials: it runs
    with pytest.raises(StudyRefused, match=r"6 of its 7 trials run, the baseline aside: finished"):
        check_study(url, "settled", False, 7, tmp_path / "settled", more=lambda done: f"--trials {done + 7}")


def test_launches_the_confirmation_did_not_need_go_back_to_the_search(oracle: Oracle, tmp_path: Path) -> None:
    """Seen on the real pair (one H100, `--resume --trials 10`): "confirmation: 2 of the 3 launches left are
    kept to relaunch the best 2 configurations until each has 2 launches" where both already had them; one
    launch searched, then "2 of the launches kept for it were not needed ...; the study is finished on this
    budget": a third of the GPU time asked for went unspent (the demo, `--resume --trials 24`: 8 of 12).
    What the confirmation does not need goes back to the search, keeping what a new leader would need."""
    url = f"sqlite:///{tmp_path / 'optuna.db'}"
    spec = oracle.spec.model_copy(update={"budget": BudgetSpec(trials=9, confirm_top=2, confirm_repeats=2)})
    study = open_study(spec, "given-back", url, resume=False)
    study.set_user_attr(StudyAttr.BUDGET_TRIALS, 9)
    sweep = in_process_sweep(spec, study, InProcessExecutor(oracle), 9, proposals=False)
    sweep.journal.folder = None
    sweep.prepare(resume=False)
    assert sweep.reserve_for_confirmation() == 2
    sweep.n_trials = 5
    sweep.run()
    # the race had repeated both leaders already: the confirmation has nothing of its own to launch
    by_config: dict[str, int] = {}
    for r in sweep.outcome.records:
        if r.objective is not None:
            by_config.setdefault(r.result.config.label(), r.number)
    leaders = sorted(
        by_config.values(),
        key=lambda n: -next(r.objective or 0.0 for r in sweep.outcome.records if r.number == n),
    )[:2]
    for first in leaders:
        params = next(t.params for t in study.get_trials(deepcopy=False) if t.number == first)
        study.enqueue_trial(dict(params), user_attrs={TrialAttr.CONFIRM_OF: first})
    sweep.n_trials = 7
    sweep.run()
    assert launched_count(study) == 7
    outcome = sweep.confirm_best()
    assert launched_count(study) >= 8  # the search got one launch back, one kept for a new leader
    assert "1 went back to the search" in outcome.confirm_note
    said = check_study(url, "given-back", True, 9, tmp_path / "given-back")
    assert said is not None  # finished on its budget: nothing left to run


def test_a_confirmation_launch_queued_again_counts_toward_its_configuration(oracle: Oracle) -> None:
    """Seen on the demo killed (`kill -9`) during its confirmation's second launch, then `--resume`d: the
    dead driver's launch was queued again (`study_lock.requeue_closed`), and the confirmation, one launch
    a round, queued that configuration's missing launch besides it; the re-queued launch ran, then the
    extra one, and the runner-up ended with 2 launches of 3, the leader with 4 and one trial left queued.
    A launch already queued runs first, out of the reserve, and the ranking follows it."""
    storage = InMemoryStorage()
    study = open_study(oracle.spec, "killed", storage, resume=False)
    sweep = _sweep(oracle, study, 12, resume=False)
    assert sweep.reserve_for_confirmation() == 4
    sweep.run()  # the search: 8 launches
    assert launched_count(study) == 8
    leader = max(
        (r for r in sweep.outcome.records if r.objective is not None), key=lambda r: r.objective or 0.0
    )
    params = next(t.params for t in study.get_trials(deepcopy=False) if t.number == leader.number)
    study.enqueue_trial(dict(params), user_attrs={TrialAttr.REQUEUED_FROM: 99})  # as requeue_closed does
    sweep.confirm_best()
    assert launched_count(study) == 12
    assert not study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,))
    launches: dict[str, int] = {}
    for r in sweep.outcome.records:
        if r.objective is not None:
            launches[r.result.config.label()] = launches.get(r.result.config.label(), 0) + 1
    assert sorted(launches.values(), reverse=True)[:2] == [3, 3], launches
