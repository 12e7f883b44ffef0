"""What the CLI checks about a study before anything starts (no Ray, no MLflow run, no folder).

A second run under a study name already taken would silently replace or mix the first one's trials;
`--resume` of a study that does not exist is a typo; `--resume` while another driver still runs the
study corrupts it; `--resume` of a finished study has nothing to do and must not overwrite its results.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from optuna.trial import TrialState

from orchestrator.driver.console.words import counted
from orchestrator.driver.store.study_lock import (
    StudyInUse,
    close_dead_drivers_trials,
    current_driver,
    find_study,
    make_storage,
    storage_exists,
)
from orchestrator.driver.store.trial_attrs import StudyAttr
from orchestrator.errors import ErrorKind, SpecsweepError


class StudyRefused(SpecsweepError, RuntimeError):
    """The study cannot be started or continued as asked; the message says the ways on."""

    kind = ErrorKind.STUDY_REFUSED


def check_study(
    storage_url: str,
    name: str,
    resume: bool,
    n_trials: int,
    study_dir: Path,
    more: Callable[[int], str] | None = None,
    ways: tuple[str, str] | None = None,
) -> str | None:
    """Raise StudyRefused if the run must not start; return a report if the study is already finished
    (there is nothing to run; ``more``: the command that runs more trials, given those done); None when
    the sweep may go ahead. ``ways``: the whole commands that continue a taken study and start a new one,
    where the flags alone would not do (under `make sweep` they go in ARGS)."""
    study = find_study(make_storage(storage_url), name) if storage_exists(storage_url) else None
    if study is not None and not study.trials and not resume:
        # A start that failed before its first trial left the study empty: it holds nothing to keep,
        # so it does not take the name (the new run carries on in it), unless its driver still lives.
        owner = current_driver(study)
        if owner is not None and owner.live():
            raise StudyRefused(
                f"--study: study '{name}' is being started by another driver ({owner.describe()}); "
                "wait for it, or choose another --study name"
            )
        return None
    if study is None:
        if resume:
            raise StudyRefused(
                f"--resume: there is no study '{name}' in {storage_url} to continue; "
                "drop --resume to start it, or check --study / --storage / --out"
            )
        if study_dir.is_dir() and any(study_dir.iterdir()):
            raise StudyRefused(
                f"--study: {study_dir} already holds the files of an earlier study '{name}' "
                "(its Optuna study is not in this storage); choose a new --study name or another --out"
            )
        return None
    if not resume:
        from orchestrator.driver.store.study import launched_count, settled  # optuna: once the checks passed

        # Counted as the resume counts them (the baseline aside), against the budget it would keep; a
        # finished study (its budget spent, or its confirmation done with launches to spare) is continued
        # by running more, not by a resume that has nothing to do.
        done, budget = launched_count(study), study.user_attrs.get(StudyAttr.BUDGET_TRIALS)
        budget = budget if isinstance(budget, int) and budget >= 1 else n_trials
        over = done >= budget or settled(study)
        run_more = more(max(done, budget)) if more is not None and over else None
        finished = run_more is not None
        new = f"start a new one: {ways[1]}" if ways else "start a new one with --study NEW_NAME"
        if run_more is not None:
            either = f"Either run more trials in it: {run_more}, or {new}"
        else:
            either = (
                f"Either continue it: {ways[0]}, or {new}"
                if ways
                else f"Either continue it with --resume, or {new}"
            )
        raise StudyRefused(
            f"--study: a study named '{name}' already exists in {storage_url} ({done} of its {budget} trials "
            f"run, the baseline aside{': finished' if finished else ''}); nothing was changed. {either}"
        )
    owner = current_driver(study)
    if owner is not None and owner.live():
        raise StudyRefused(
            f"--resume: study '{name}' is being run by another driver ({owner.describe()}); "
            "wait for it to finish, or stop it (Ctrl-C) and then --resume"
        )
    from orchestrator.driver.store.study import launched_count, settled  # optuna: once the checks passed

    running = study.get_trials(deepcopy=False, states=(TrialState.RUNNING, TrialState.WAITING))
    done = launched_count(study)
    budget = study.user_attrs.get(StudyAttr.BUDGET_TRIALS)
    # Settled on this budget: the launches it kept for its confirmation were not needed, and a resume on
    # the same budget would start Ray to launch nothing.
    spare = settled(study) and isinstance(budget, int) and n_trials <= budget
    if (done < n_trials and not spare) or running:
        return None
    return finished_report(name, done, max(n_trials, done), study_dir, more)


def study_budget(
    storage_url: str, name: str, resume: bool, flag: int | None, spec_trials: int
) -> tuple[int, str]:
    """The trial budget of this run and where it comes from: --trials, else (on --resume) the budget
    the study was last run with, else the spec's."""
    if flag is not None:
        return flag, "--trials"
    if resume and storage_exists(storage_url):
        study = find_study(make_storage(storage_url), name)
        stored = study.user_attrs.get(StudyAttr.BUDGET_TRIALS) if study is not None else None
        if isinstance(stored, int) and stored >= 1:
            return stored, "the study's own budget, from its earlier run; --trials N changes it"
    return spec_trials, "the spec's budget.trials"


def finished_report(
    name: str, done: int, n_trials: int, study_dir: Path, more: Callable[[int], str] | None = None
) -> str:
    """What a finished study found, from its saved results; nothing is written."""
    # A study settled below its budget (`study.settled`) says why the rest was not launched.
    spare = n_trials - done
    last = "the last launch" if spare == 1 else f"the last {spare} launches"
    rest = f", {last} kept for a confirmation that did not need {'it' if spare == 1 else 'them'}"
    lines = [
        f"study '{name}' has already run {counted(done, 'trial')} "
        f"(budget {n_trials}{rest if spare > 0 else ''}): "
        "nothing to do, nothing changed.",
    ]
    from orchestrator.driver.answer.best_file import (  # pydantic: once the quick checks passed
        BEST_COMMAND,
        BestFile,
    )
    from orchestrator.driver.answer.choose import Call
    from orchestrator.driver.answer.conclusion import nospec_lines

    best = BestFile.read(study_dir)
    if best is not None:
        lines.append(best.headline())
        # What the sweep's end said against the server without speculation, as it said it (a lone
        # answer's reasons, the lossy and unfinished trials, are the run's, not best.json's).
        if best.verdict.call is not Call.ALONE:
            lines.extend(nospec_lines(best))
        lines.append(f"confidence: {best.verdict.statement}")
        lines.append(f"SGLang launch command: {study_dir / BEST_COMMAND}")
    report = study_dir / "report.html"
    if report.is_file():
        lines.append(f"report: {report}")
    # The whole command, as the user started the sweep (under make, its ARGS): a fragment was neither.
    lines.append(
        f"to run more trials: {more(max(done, n_trials))}"
        if more
        else f"to run more: --resume --trials N above {max(done, n_trials)}"
    )
    return "\n".join(lines)


__all__ = ["StudyInUse", "StudyRefused", "check_study", "close_dead_drivers_trials"]
