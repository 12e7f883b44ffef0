"""What a launch costs the budget (`launched_count`): the baseline's first launch is a reference and
free; a race's repeat of it is a launch like any other, else a race against the baseline would never
spend the budget that bounds it."""

from __future__ import annotations

import optuna

from orchestrator.driver.store.study import launched_count
from orchestrator.driver.store.trial_attrs import TrialAttr

FRACTION = {"mem_fraction_static": optuna.distributions.FloatDistribution(0.5, 0.95)}


def _told(study: optuna.Study, attrs: dict[str, object]) -> None:
    trial = study.ask(FRACTION)
    for key, value in attrs.items():
        trial.set_user_attr(key, value)
    study.tell(trial, 100.0)


def test_the_first_baseline_is_free_and_its_race_repeats_are_paid() -> None:
    study = optuna.create_study(direction="maximize")
    _told(study, {TrialAttr.BASELINE: True})
    assert launched_count(study) == 0
    _told(study, {})
    assert launched_count(study) == 1
    _told(study, {TrialAttr.BASELINE: True, TrialAttr.CONFIRM_OF: 0})
    _told(study, {TrialAttr.BASELINE: True, TrialAttr.CONFIRM_OF: 0})
    assert launched_count(study) == 3
