"""Optuna policy: how the study is opened, what it is told for each outcome, what counts as a launch.

An OOM is told as PRUNED with the constraint `oom` violated, so the sampler learns the boundary; other
failures are FAIL with a reason and never count as infeasible.
"""

from __future__ import annotations

import logging
import warnings
from typing import Any

import optuna
from optuna.trial import FrozenTrial

from orchestrator.driver.store.optuna_tell import OptunaTell, optuna_tell
from orchestrator.driver.store.pruner import MachinePercentilePruner
from orchestrator.driver.store.study_lock import closed_numbers, make_storage
from orchestrator.driver.store.trial_attrs import StudyAttr, TrialAttr, free_reference, requeued_attrs
from orchestrator.records import TrialStatus
from orchestrator.spec.sweep_spec import SweepSpec

__all__ = [
    "finished_elsewhere",
    "launched_count",
    "objective_name",
    "open_study",
    "status_of",
    "tell",
    "tell_outcome",
]

_FREE_STATUSES = frozenset(s.value for s in TrialStatus if s.free)

log = logging.getLogger(__name__)


def open_study(
    spec: SweepSpec, name: str, storage: str | optuna.storages.BaseStorage, resume: bool
) -> optuna.Study:
    """Create the study, or load it with `resume`. A study is never deleted: the CLI refuses to start a
    new one under a name already taken (study_lock and the CLI say so before anything starts)."""
    if isinstance(storage, str) and not storage.startswith("sqlite:///:memory:"):
        storage = make_storage(storage)
    # A resumed study's sampler must not replay the proposals its first invocation already made.
    seed = spec.sampler_seed
    if resume:
        try:
            seed += len(optuna.load_study(study_name=name, storage=storage).trials)
        except KeyError:
            pass
    # group=True: the speculative values exist only together and draft tokens only for top-k > 1, so the
    # space is conditional; grouped multivariate TPE models each sub-space jointly (benchmarks/: it
    # reaches 98 % of the best in more runs on every profile than the ungrouped sampler).
    sampler = optuna.samplers.TPESampler(
        seed=seed, multivariate=True, group=True, constant_liar=True, n_startup_trials=5
    )
    # Cut only what is clearly worse (Optuna's percentile is what is *kept*: 75 prunes the bottom
    # quarter), and only after two stages: a configuration built for high concurrency may be ordinary
    # at low concurrency.
    # Judged within a machine where the loop says so (`pruner`).
    pruner = MachinePercentilePruner(75.0, n_startup_trials=4, n_warmup_steps=1)
    study = optuna.create_study(
        study_name=name,
        storage=storage,
        direction="maximize",
        sampler=sampler,
        pruner=pruner,
        load_if_exists=True,
    )
    study.set_user_attr(StudyAttr.SPEC_NAME, spec.name)
    if study.metric_names is None:  # and a study made before it was named: named on --resume
        with warnings.catch_warnings():  # experimental since Optuna 3.2, and what the dashboard reads
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            study.set_metric_names([objective_name(spec)])
    return study


def objective_name(spec: SweepSpec) -> str:
    """The value told for a completed trial, as the dashboard names it (`settle.objective_value`): the
    best stage's tok/s, among the stages within the spec's latency limits when it sets any."""
    obj = spec.objective
    within = obj.itl_p99_ms_max is not None or obj.ttft_p99_ms_max is not None
    return f"{obj.metric} (best stage{' within the latency limits' if within else ''})"


def tell_outcome(
    study: optuna.Study, trial: optuna.Trial, status: TrialStatus, objective: float | None, pruned: bool
) -> None:
    """Tell Optuna what happened so that the sampler learns from it (`optuna_tell` says what)."""
    tell(study, trial, optuna_tell(status, objective, pruned))


def tell(study: optuna.Study, trial: optuna.Trial, told: OptunaTell) -> None:
    for name, value in told.constraints.items():
        trial.set_constraint(name, value)
    if told.value is not None:
        study.tell(trial, told.value)
    else:
        study.tell(trial, state=told.state)


def launched_count(study: optuna.Study) -> int:
    """Trials that count against the budget: launched and finished. A predicted-OOM skip costs no GPU
    time, a trial lost with its node, or interrupted (closed for a dead or stopped driver), says nothing
    about its configuration (it is re-queued), and the baseline is a reference: none of them uses up a
    launch. (An interrupted launch is still shown: `TrialStatus.INTERRUPTED`.)"""
    return len(_paid(study))


def mark_settled(study: optuna.Study) -> None:
    """Record that the study's confirmation needed no more launches than it has: its budget's rest, kept
    for relaunches its best configurations already had, is not owed to anything (`settled`)."""
    study.set_user_attr(StudyAttr.SETTLED_AT, launched_count(study))


def settled(study: optuna.Study) -> bool:
    """Whether the study ended its confirmation with launches to spare and has launched nothing since."""
    return study.user_attrs.get(StudyAttr.SETTLED_AT) == launched_count(study)


def confirmation_count(study: optuna.Study) -> int:
    """The launches of `launched_count` that confirmation made (a relaunched baseline's among them)."""
    return sum(1 for t in _paid(study) if TrialAttr.CONFIRM_OF in t.user_attrs)


def _paid(study: optuna.Study) -> list[FrozenTrial]:
    closed = closed_numbers(study)
    return [
        t
        for t in study.get_trials(deepcopy=False)
        if t.state.is_finished()
        and t.number not in closed
        and TrialAttr.CLOSED not in t.user_attrs
        and TrialAttr.WARM_START_FROM not in t.user_attrs
        and TrialAttr.REPEAT_OF not in t.user_attrs
        and not free_reference(
            bool(t.user_attrs.get(TrialAttr.BASELINE)), t.user_attrs.get(TrialAttr.CONFIRM_OF)
        )
        and t.user_attrs.get(TrialAttr.STATUS) not in _FREE_STATUSES
    ]


def finished_elsewhere(study: optuna.Study, trial: optuna.Trial) -> bool:
    return study._storage.get_trial(trial._trial_id).state.is_finished()


def status_of(t: FrozenTrial) -> TrialStatus | None:
    try:
        return TrialStatus(t.user_attrs.get(TrialAttr.STATUS, ""))
    except ValueError:
        return None


def close_and_requeue(study: optuna.Study, trial: optuna.Trial, attrs: dict[str, Any] | None = None) -> bool:
    """A trial cut short by Ctrl-C, SIGTERM or an error in the driver measured nothing: close it (FAIL,
    with ``attrs``: an interrupted trial's settled attributes, so that the table shows it) and queue its
    configuration again, so that --resume runs it and the budget is not spent on it. False when another
    process had closed it already."""
    if finished_elsewhere(study, trial):
        return False
    try:
        for key, value in (attrs or {}).items():
            trial.set_user_attr(key, value)
        trial.set_user_attr(TrialAttr.CLOSED, "interrupted: the driver stopped")
        study.tell(trial, state=optuna.trial.TrialState.FAIL)
    except (ValueError, RuntimeError) as err:  # already closed elsewhere: nothing left to do
        log.warning("trial %d could not be closed: %s", trial.number, err)
        return False
    requeue(study, trial)
    return True


def close_unlaunched(study: optuna.Study, trial: optuna.Trial) -> bool:
    """A draw that waited for the record of a twin (`driver.loop.twins`) and was never launched: closed
    (FAIL) when the driver stops, and not re-queued: a re-queued trial is launched whatever the record
    says. False when another process had closed it already."""
    if finished_elsewhere(study, trial):
        return False
    try:
        trial.set_user_attr(TrialAttr.CLOSED, "not launched: it waited for a twin's record")
        study.tell(trial, state=optuna.trial.TrialState.FAIL)
    except (ValueError, RuntimeError) as err:  # already closed elsewhere: nothing left to do
        log.warning("trial %d could not be closed: %s", trial.number, err)
        return False
    return True


def requeue(study: optuna.Study, trial: optuna.Trial) -> None:
    """Queue a trial's configuration again, marked as such (a re-queued trial is never re-queued again)."""
    study.enqueue_trial(dict(trial.params), user_attrs=requeued_attrs(trial.number, trial.user_attrs))


def tell_repeat(
    study: optuna.Study,
    trial: optuna.Trial,
    label: str,
    seen: tuple[int, TrialStatus, float | None],
) -> None:
    """Answer a proposal of an already measured server from the record of the trial that measured it
    (``seen``: its number, status and objective); the proposal keeps its own configuration's ``label``
    (another name of that server, or the same)."""
    number, status, objective = seen
    trial.set_user_attr(TrialAttr.CONFIG, label)
    trial.set_user_attr(TrialAttr.REPEAT_OF, number)
    trial.set_user_attr(TrialAttr.STATUS, status.value)
    tell_outcome(study, trial, status, objective, pruned=False)
