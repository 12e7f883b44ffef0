"""`python -m orchestrator.sweep [SPEC]`: run a sweep and say where to watch it.

With no arguments it runs `trials/demo.yaml` against the embedded simulated node on a local Ray
instance, writing everything under `runs/`. This is the entry (`main`, `run`); its parts are in
`orchestrator/cli_parts/`: the flags, the subcommands, stopping, and the lines a sweep starts and ends with.
"""

from __future__ import annotations

import argparse
import logging
import re
import sys
import time
from pathlib import Path
from typing import Any

from orchestrator.bench.traffic import check_workload, workload_counts
from orchestrator.cli_parts.announce import announce
from orchestrator.cli_parts.parser import MODULE_PROG, SCRIPT_PROG, build_parser
from orchestrator.cli_parts.stopping import (
    TERMINATED,
    Terminated,
    interrupted_message,
    new_study_command,
    record_interrupts,
    resume_command,
    search_and_confirm,
    stop_on_sigterm,
    under_make,
)
from orchestrator.cli_parts.subcommands import COMMANDS
from orchestrator.driver.console.cli_checks import (
    check_draft_algorithm,
    check_local_model_paths,
    check_run_flags,
    check_weights_fit,
    resolve_spec_path,
)
from orchestrator.driver.console.destinations import check_destinations
from orchestrator.driver.console.destinations import resolve as resolve_destinations
from orchestrator.driver.console.quiet import quiet_libraries
from orchestrator.driver.console.words import counted
from orchestrator.spec.search import SpecError
from orchestrator.spec.search_warnings import draft_cap_warnings, one_server_warnings
from orchestrator.spec.sweep_spec import NAME_PATTERN, Backend, SweepSpec, load_spec
from orchestrator.spec.workload_warnings import few_prompts_warning, short_stage_warning

# What other code and the tests reach through the entry, wherever it is defined.
__all__ = [
    "COMMANDS",
    "TERMINATED",
    "Terminated",
    "build_parser",
    "main",
    "parent_run_fields",
    "resolve_profile",
    "resume_command",
    "run",
    "search_and_confirm",
]


def main(argv: list[str] | None = None) -> int:
    record_interrupts()
    stop_on_sigterm()
    try:
        return _main(argv)
    except KeyboardInterrupt as err:
        # The search handles its own (closing its trials, printing the command that continues); this is
        # a Ctrl-C or SIGTERM before it (Ray's start, the study, MLflow) or after it (the report).
        term = isinstance(err, Terminated) or TERMINATED["seen"]
        args, study = RUNNING.get("args"), RUNNING.get("study")
        said = "\nterminated (SIGTERM)" if term else "\ninterrupted"
        text = interrupted_message(args, str(study), term) if args is not None else said
        print(text, file=sys.stderr)
        return 143 if term else 130


# The invocation's arguments and study once known: what a Ctrl-C outside the search names.
RUNNING: dict[str, Any] = {}


def _main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    # A spec file that happens to be named `fit` or `report` in this folder is still a spec.
    invoked = Path(sys.argv[0]).name if sys.argv else ""
    # --help and usage errors name the command as the user typed it: the installed script or the module.
    prog = SCRIPT_PROG if invoked == SCRIPT_PROG else MODULE_PROG
    if argv and argv[0] in COMMANDS and not Path(argv[0]).is_file():
        return COMMANDS[argv[0]](argv[1:], f"{prog} {argv[0]}")
    args = build_parser(prog).parse_args(argv)
    RUNNING["args"] = args
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        if args.study is not None and not re.fullmatch(NAME_PATTERN, args.study):
            raise SpecError(
                f"--study: {args.study!r} is not a plain name (it names a folder under --out and the "
                "MLflow experiment); use letters, digits, '_', '.' and '-', starting with a letter or digit"
            )
        spec = load_spec(resolve_spec_path(args.spec))
        sim_profile = resolve_profile(spec)
        # A missing model folder is named as model.path before the workload reads its tokenizer from it.
        check_local_model_paths(spec, args.ray_address)
        check_workload(spec)
        check_run_flags(args)
        check_draft_algorithm(spec)
        check_weights_fit(spec)
        # Every destination is checked before anything is created: a failed start leaves nothing behind.
        dest = resolve_destinations(args.out, args.study or spec.name, args.tracking_uri, args.storage)
        check_destinations(dest, args.ray_address)
    except SpecError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    quiet_libraries(args.verbose, local_ray=args.ray_address is None)
    study_name, study_dir, tracking_uri, storage = (
        dest.study_dir.name,
        dest.study_dir,
        dest.tracking_uri,
        dest.storage,
    )
    RUNNING["study"] = study_name
    from orchestrator.driver.console.study_guard import StudyRefused, check_study, study_budget

    try:
        # A resumed study keeps the budget it was run with, unless --trials says otherwise.
        n_trials, budget_source = study_budget(
            storage, study_name, args.resume, args.trials, spec.budget.trials
        )
        # Before anything starts: a study is never overwritten, never run by two drivers, and a
        # finished one is not run again.
        finished = check_study(
            storage,
            study_name,
            args.resume,
            n_trials,
            study_dir,
            # Another budget's worth of trials beyond those done (the study's own budget is spent).
            more=lambda done: resume_command(args, study_name, trials=done + spec.budget.trials),
            ways=(resume_command(args, study_name), new_study_command(args)) if under_make() else None,
        )
    except StudyRefused as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if finished is not None:
        print(finished)
        return 0
    print(f"budget: {counted(n_trials, 'trial')} ({budget_source})")
    from orchestrator.driver.dispatch.reaper import start_reaper

    # A Ray head this driver starts must not outlive it, even killed with SIGKILL (`reaper`).
    reaper = start_reaper() if args.ray_address is None else None
    try:
        return run(spec, args, n_trials, sim_profile, study_name, study_dir, tracking_uri, storage)
    finally:
        if reaper is not None:
            reaper.release()


def parent_run_fields(
    spec: SweepSpec, args: argparse.Namespace, n_trials: int, study: str
) -> tuple[dict[str, str], dict[str, str]]:
    """The params and tags of the invocation's MLflow parent run: the spec's, and what each dataset gives
    a stage (the console's `dataset ...` lines, as figures and in words)."""
    from orchestrator.mlflow_schema import sweep_params, sweep_tags

    datasets = workload_counts(spec)  # read when the spec was checked
    return sweep_params(spec, args.spec, n_trials, datasets), sweep_tags(study, args.resume, datasets)


def resolve_profile(spec: SweepSpec) -> dict[str, Any] | None:
    if spec.backend is not Backend.SIMULATED:
        return None
    from orchestrator.sim.profile import load_profile

    assert spec.simulated is not None
    try:
        source = spec.simulated.profile
        profile = load_profile(source)  # a name, a file, or a mapping (which may name a base profile)
    except Exception as err:
        raise SpecError(f"simulated.profile: {err}") from None
    from orchestrator.sim.node_fit import spec_refusal

    refused = spec_refusal(profile, spec.node.gpus, spec.model.speculative_algorithm)
    if refused:
        raise SpecError(refused)
    return profile.model_dump(mode="json")


def run(
    spec: SweepSpec,
    args: argparse.Namespace,
    n_trials: int,
    sim_profile: dict[str, Any] | None,
    study_name: str,
    study_dir: Path,
    tracking_uri: str,
    storage: str,
) -> int:
    # Heavy imports after the spec is known to be good: a bad spec fails in a fraction of a second.
    from orchestrator.driver.answer.confirm import confirmation_line, confirmation_note
    from orchestrator.driver.dispatch import cluster
    from orchestrator.driver.loop.sweep import Sweep
    from orchestrator.driver.store.study import confirmation_count, open_study
    from orchestrator.driver.store.study_lock import DriverLease, StudyInUse, current_driver
    from orchestrator.driver.store.tracking import Tracker
    from orchestrator.driver.store.trial_attrs import StudyAttr
    from orchestrator.mlflow_schema import LaunchParams

    info = cluster.connect(spec, args.ray_address, dashboard=not args.no_dashboard)
    stop_on_sigterm()  # Ray's start put its own handler in place
    # A missing model (or its config.json) first: it names the file, where a GPU count says less.
    missing = cluster.preflight_paths(spec)
    if missing:
        where = "; ".join(f"node {node[:12]}: {', '.join(paths)}" for node, paths in missing.items())
        print(
            f"error: model.path / model.draft_path: not found on the trial nodes ({where}); "
            "copy the model there or fix the spec",
            file=sys.stderr,
        )
        return 2
    shortfall = cluster.gpu_shortfall(spec)
    if shortfall:
        print(f"error: node.gpus: {shortfall}", file=sys.stderr)
        return 2
    study_dir.mkdir(parents=True, exist_ok=True)  # only once the nodes can run it: a refusal leaves nothing
    study = open_study(spec, study_name, storage, args.resume)
    before = current_driver(study)  # a dead driver's stamp, until this one's lease replaces it
    lease = DriverLease(study)
    try:
        lease.acquire()
    except StudyInUse as err:
        print(
            f"error: study '{study_name}' is being run by another driver ({err}); wait for it",
            file=sys.stderr,
        )
        return 2
    study.set_user_attr(StudyAttr.BUDGET_TRIALS, n_trials)  # what a plain --resume keeps
    local_store = tracking_uri.startswith(("sqlite:", "file:")) or "://" not in tracking_uri
    artifacts_dir = study_dir.parent / "mlartifacts" / study_name if local_store else None
    tracker = Tracker(
        tracking_uri, study_name, study_dir / "spool", artifacts_dir, launch=LaunchParams.from_spec(spec)
    )
    params, tags = parent_run_fields(spec, args, n_trials, study_name)
    tracker.start(run_name=f"sweep {time.strftime('%Y-%m-%d %H:%M:%S')}", params=params, tags=tags)
    announce(spec, info, study, tracker, before, study_name, n_trials, tracking_uri, storage)
    from orchestrator.driver.console.progress import ProgressPrinter

    tty = sys.stdout.isatty()
    printer = ProgressPrinter(n_trials, tty, lambda text: print(text, end="", flush=True))
    show, record = printer.show, printer.record

    sweep = Sweep(
        spec,
        study,
        tracker,
        n_trials=n_trials,
        workdir=study_dir,
        sim_profile=sim_profile,
        on_progress=show,
        on_record=record,
        time_budget_s=args.time_budget,
        lease=lease,
    )
    sweep.prepare(args.resume)
    left = sweep.remaining()
    reserved = sweep.reserve_for_confirmation()
    if reserved:
        print(f"  {confirmation_line(spec.budget, reserved, left, sweep.confirmation_needed())}")
    elif note := confirmation_note(
        spec.budget,
        left,
        spent=n_trials - left if args.resume else 0,
        confirmed=confirmation_count(study) if args.resume else 0,
        by_flag=args.trials is not None,
    ):
        print(f"warning: {note}", file=sys.stderr)
    for warning in (
        short_stage_warning(spec),
        few_prompts_warning(spec),
        *one_server_warnings(spec),
        *draft_cap_warnings(spec),
    ):
        if warning:
            print(warning, file=sys.stderr)
    if args.warm_start and not args.resume:
        from orchestrator.driver.search.history import find_history, seed_study

        past = find_history(tracking_uri, spec, exclude=study_name)
        counts = seed_study(study, spec.search, past, sweep.memory_model)
        print(
            f"  warm start from {len({p.experiment for p in past})} earlier study(ies): "
            f"{counts['infeasible']} OOM(s) and {counts['feasible']} result(s) learned, "
            f"{counts['enqueued']} best configuration(s) queued, memory model "
            f"{'ready' if sweep.memory_model.ready else 'not ready'}"
        )
    ended = search_and_confirm(sweep, tracker, lease, args)
    if isinstance(ended, int):
        return ended
    from orchestrator.cli_parts.wrap_up import wrap_up  # Optuna and MLflow: not loaded to check a spec

    return wrap_up(
        ended, sweep, study, tracker, spec, args, n_trials, study_name, study_dir, tracking_uri, storage, tty
    )


if __name__ == "__main__":
    sys.exit(main())
