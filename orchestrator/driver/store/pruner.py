"""The study's pruner: Optuna's percentile rule, whose peers can be the launches of one machine.

Where the host sets the pace (an overhead-bound server: a small model, or a large one at low load) the
same configuration measures up to half as much again on one machine as on another, and a launch judged by
another machine's launches is cut for where it ran, not for what it is. The loop names the machine a
trial is to be judged on (`TrialAttr.PRUNE_WITHIN`, from the regime the launches show); a trial that names
none is judged by every completed trial, as Optuna's own pruner does.
"""

from __future__ import annotations

from collections.abc import Container, Sequence
from typing import Any, cast

import optuna
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState

from orchestrator.driver.store.trial_attrs import TrialAttr


class _OnMachine:
    """What the percentile rule reads of a study (its direction, its trials), narrowed to one machine's
    trials."""

    def __init__(self, study: optuna.Study, machine: str) -> None:
        self._study = study
        self._machine = machine

    @property
    def direction(self) -> StudyDirection:
        return self._study.direction

    def get_trials(
        self, deepcopy: bool = True, states: Container[TrialState] | None = None
    ) -> Sequence[FrozenTrial]:
        trials = self._study.get_trials(deepcopy=deepcopy, states=states)
        return [t for t in trials if t.user_attrs.get(TrialAttr.MACHINE) == self._machine]


class MachinePercentilePruner(optuna.pruners.PercentilePruner):
    """Optuna's `PercentilePruner`, comparing a trial that names a machine to judge it on
    (`TrialAttr.PRUNE_WITHIN`) with that machine's completed trials only: their count then decides the
    start-up wait too, so a machine's first launches run whole."""

    def prune(self, study: optuna.Study, trial: FrozenTrial) -> bool:
        within: Any = trial.user_attrs.get(TrialAttr.PRUNE_WITHIN)
        if not within:
            return super().prune(study, trial)
        return super().prune(cast(optuna.Study, _OnMachine(study, str(within))), trial)
