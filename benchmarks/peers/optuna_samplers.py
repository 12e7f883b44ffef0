"""Optuna's own samplers on the same `suggest_config` specsweep searches, as a plain set-up would run them:
ask, launch what was proposed (repeats included), tell, and answer with Optuna's `best_trial`."""

from __future__ import annotations

from collections.abc import Sequence

import optuna
from optuna.storages import InMemoryStorage
from optuna.trial import FrozenTrial, TrialState

from benchmarks.launches.noisy import Launcher
from benchmarks.launches.run_record import SearchRun, done
from orchestrator.driver.search.space import suggest_config
from orchestrator.records import ServerConfig


def _oom(trial: FrozenTrial) -> Sequence[float]:
    return [float(trial.user_attrs.get("oom", 0.0))]


def _optuna_run(
    name: str, launcher: Launcher, sampler: optuna.samplers.BaseSampler, *, fail_infeasible: bool
) -> SearchRun:
    """Ask, launch, tell, until the budget is spent. With `fail_infeasible` an OOM is told as FAIL (what
    a plain set-up does, and TPE then ignores it); otherwise it is told as a zero with the `oom`
    constraint violated (the GP sampler ignores FAIL trials but learns from constraints)."""
    study = optuna.create_study(direction="maximize", sampler=sampler, storage=InMemoryStorage())
    while not launcher.exhausted:
        trial = study.ask()
        config = suggest_config(trial, launcher.oracle.spec.search)
        lc = launcher.launch(config)
        trial.set_user_attr("oom", 1.0 if lc.status.infeasible else 0.0)
        if lc.objective is not None:
            study.tell(trial, lc.objective)
        elif fail_infeasible:
            study.tell(trial, state=TrialState.FAIL)
        else:
            study.tell(trial, 0.0)
    return done(name, launcher)


def plain_tpe(launcher: Launcher, configs: Sequence[ServerConfig]) -> SearchRun:
    sampler = optuna.samplers.TPESampler(seed=launcher.seed)
    return _optuna_run("plain_tpe", launcher, sampler, fail_infeasible=True)


def gp(launcher: Launcher, configs: Sequence[ServerConfig]) -> SearchRun:
    """Optuna's GP sampler with the OOM constraint (`constraints_func`)."""
    sampler = optuna.samplers.GPSampler(seed=launcher.seed, constraints_func=_oom)
    return _optuna_run("gp", launcher, sampler, fail_infeasible=False)
