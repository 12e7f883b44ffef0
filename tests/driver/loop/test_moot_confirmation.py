"""No launch confirms a tree that no repeat could make the answer.

The product's sweep on the real pair (SmolLM2-135M and its trained EAGLE-3 draft, one H100) measured the
server without speculation at 6850.1 tok/s and its first tree at 3621.5, 89.8 % behind where noise alone
opens 26.3 %; its time budget then ended the search "so that the 1 confirmation launches still fit" and
relaunched that tree (3595.8): a launch that could not change the answer, where another tree could have
been tried. Where the answer is the server without speculation, clearly ahead of the fastest speculative
configuration on the machine both ran on, and speculation pays at no concurrency level, the
confirmation launches nothing and a time budget lets the search run on to its deadline.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from benchmarks.truth.oracle import Oracle
from orchestrator.driver.answer.choose import Call
from orchestrator.driver.answer.conclusion import confirmation_moot, sweep_answer
from orchestrator.driver.dispatch.executor import Handle
from orchestrator.driver.loop.outcome import StopReason
from orchestrator.driver.store.study import settled
from orchestrator.driver.store.trial_attrs import TrialAttr
from orchestrator.records import TrialResult
from orchestrator.spec.sweep_spec import SweepSpec
from tests.driver.answer.test_confirm_time_budget import (
    ClockedExecutor,
    _any_ok,
    oracle,  # noqa: F401 (a fixture)
)
from tests.driver.answer.test_confirm_time_budget import _sweep as clocked_sweep
from tests.driver.loop.test_nospec_sweep import DraftScaled, _sweep, case  # noqa: F401 (a fixture)


def _confirmations(study_trials: list) -> list[int]:  # type: ignore[type-arg]
    return [t.number for t in study_trials if TrialAttr.CONFIRM_OF in t.user_attrs]


def test_a_baseline_clearly_ahead_at_every_level_is_not_confirmed_by_relaunching_trees(
    case: tuple[SweepSpec, Oracle],  # noqa: F811
) -> None:
    spec, simulated = case
    sweep = _sweep(spec, DraftScaled(simulated, {1: 0.3, 4: 0.3}))
    records = sweep.outcome.records
    answer = sweep_answer(records, sweep.lossless.lossy)
    assert answer is not None and answer.nospec and answer.verdict.call is Call.CLEARLY_AHEAD
    assert confirmation_moot(records, sweep.lossless.lossy)
    assert _confirmations(sweep.study.get_trials(deepcopy=False)) == []
    # The launches kept for it are said, and the study is finished: a resume on this budget would start
    # Ray to launch nothing (the real pair on an H100 was left so).
    assert sweep.confirm_reserve > 0
    assert "not needed: no relaunch could change the answer" in sweep.outcome.confirm_note
    assert settled(sweep.study)


def test_speculation_that_pays_at_one_level_is_still_confirmed(
    case: tuple[SweepSpec, Oracle],  # noqa: F811
) -> None:
    """The whole answer is the baseline, but at concurrency 1 a tree doubles it: its per-level answer
    rests on the speculative launches, which the confirmation repeats."""
    spec, simulated = case
    sweep = _sweep(spec, DraftScaled(simulated, {1: 1.0, 4: 0.3}))
    assert not confirmation_moot(sweep.outcome.records, sweep.lossless.lossy)
    assert _confirmations(sweep.study.get_trials(deepcopy=False))


class ClockedScaled(ClockedExecutor):
    """The time budget's executor, with every speculative stage at a third of the oracle's figure."""

    def result(self, handle: Handle) -> TrialResult:
        result = super().result(handle)
        if not result.config.speculative:
            return result
        stages = tuple(replace(s, output_tok_per_s=s.output_tok_per_s * 0.3) for s in result.stages)
        return replace(result, stages=stages)


def test_a_time_budget_searches_on_where_a_confirmation_could_not_change_the_answer(
    oracle: Oracle,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    executor = ClockedScaled(oracle)
    budget_s = 16 * oracle.evaluate(_any_ok(oracle)).seconds()
    sweep = clocked_sweep(oracle, executor, budget_s, monkeypatch, baseline=True)
    sweep.prepare(resume=False)
    assert sweep.reserve_for_confirmation() > 0
    sweep.run()
    outcome = sweep.confirm_best()
    assert outcome.stop_reason is StopReason.TIME_BUDGET and not sweep.stopped_to_confirm
    assert _confirmations(sweep.study.get_trials(deepcopy=False)) == []
    answer = sweep_answer(outcome.records, sweep.lossless.lossy)
    assert answer is not None and answer.nospec
    # the search ran to the deadline: its last launch started within a launch of it
    assert max(executor.started_at) < budget_s <= max(executor.started_at) + 2 * budget_s / 16
