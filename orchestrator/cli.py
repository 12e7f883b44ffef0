"""`python -m orchestrator.sweep [SPEC]`: run a sweep and say where to watch it.

With no arguments it runs `trials/demo.yaml` against the embedded simulated node on a local Ray
instance, writing everything under `runs/`.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import shlex
import signal
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from orchestrator.bench.traffic import check_workload, workload_counts, workload_lines
from orchestrator.driver.answer.summary import render_table, table_rows
from orchestrator.driver.console.cli_checks import (
    DEFAULT_SPEC,
    check_draft_algorithm,
    check_local_model_paths,
    check_run_flags,
    check_weights_fit,
    resolve_spec_path,
)
from orchestrator.driver.console.destinations import check_destinations
from orchestrator.driver.console.destinations import resolve as resolve_destinations
from orchestrator.driver.console.quiet import quiet_libraries
from orchestrator.driver.store.tracking import RunStatus, ui_hint
from orchestrator.mlflow_schema import Tag
from orchestrator.spec.search import SpecError
from orchestrator.spec.sweep_spec import NAME_PATTERN, Backend, SweepSpec, load_spec, short_stage_warning

if TYPE_CHECKING:
    from orchestrator.driver.loop.outcome import SweepOutcome
    from orchestrator.driver.loop.sweep import Sweep
    from orchestrator.driver.store.study_lock import DriverLease
    from orchestrator.driver.store.tracking import Tracker

log = logging.getLogger("orchestrator")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m orchestrator.sweep",
        description="Find the fastest SGLang + EAGLE-3 configuration: Optuna proposes, Ray runs one trial "
        "per whole node, MLflow records every trial.",
        epilog="Also: `specsweep fit MODEL_DIR [--draft DIR] --gpu-memory-mib N --fraction F [--tp N]` "
        "(one launch's memory per GPU from config.json, before any GPU; --help for its flags) and "
        "`specsweep report [STUDY]` (a study's HTML report).",
    )
    p.add_argument(
        "spec", nargs="?", default=str(DEFAULT_SPEC), help="sweep spec (YAML); default %(default)s"
    )
    p.add_argument(
        "--trials", type=int, default=None, help="trial budget (default: the spec's budget.trials)"
    )
    p.add_argument(
        "--study", default=None, help="Optuna study and MLflow experiment name (default: spec name)"
    )
    p.add_argument(
        "--ray-address",
        default=None,
        help="join this Ray cluster (e.g. auto, or ray://head:10001); "
        "default: start a local Ray instance that stands for one node",
    )
    p.add_argument(
        "--tracking-uri", default=None, help="MLflow tracking URI (default: sqlite:///OUT/mlflow.db)"
    )
    p.add_argument("--storage", default=None, help="Optuna storage URL (default: sqlite:///OUT/optuna.db)")
    p.add_argument("--out", default="runs", help="folder for logs, the study, reports (default: %(default)s)")
    p.add_argument("--resume", action="store_true", help="continue the study: no trial repeated or lost")
    p.add_argument(
        "--time-budget",
        type=float,
        default=None,
        metavar="SECONDS",
        help="start no new trial after this many seconds; running trials finish (continue with --resume)",
    )
    p.add_argument(
        "--warm-start",
        action="store_true",
        help="seed a new study from earlier sweeps of the same model and GPUs in MLflow: their best "
        "configurations first, their OOM boundary and memory figures learned before any launch (from "
        "sweeps on nodes of another GPU count, the memory figures only, scaled to this tp)",
    )
    p.add_argument("--no-dashboard", action="store_true", help="do not start Ray's dashboard (faster start)")
    p.add_argument("-v", "--verbose", action="store_true", help="log every trial event")
    return p


def _fit(argv: list[str]) -> int:
    from orchestrator.driver.memory.fit import main as fit_main

    return fit_main(argv, prog="specsweep fit")


def _report(argv: list[str]) -> int:
    from orchestrator.report.page import main as report_main

    return report_main(argv, prog="specsweep report")


# `specsweep fit ...` and `specsweep report ...` beside `specsweep [SPEC]`: the same commands as their
# `python -m` paths (four modules deep for the memory command), under the one installed name.
COMMANDS = {"fit": _fit, "report": _report}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    # A spec file that happens to be named `fit` or `report` in this folder is still a spec.
    if argv and argv[0] in COMMANDS and not Path(argv[0]).is_file():
        return COMMANDS[argv[0]](argv[1:])
    args = build_parser().parse_args(argv)
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
        check_workload(spec)
        check_run_flags(args)
        check_local_model_paths(spec, args.ray_address)
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
    from orchestrator.driver.store.study_guard import StudyRefused, check_study, study_budget

    try:
        # A resumed study keeps the budget it was run with, unless --trials says otherwise.
        n_trials, budget_source = study_budget(
            storage, study_name, args.resume, args.trials, spec.budget.trials
        )
        # Before anything starts: a study is never overwritten, never run by two drivers, and a
        # finished one is not run again.
        finished = check_study(storage, study_name, args.resume, n_trials, study_dir)
    except StudyRefused as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if finished is not None:
        print(finished)
        return 0
    print(f"budget: {n_trials} trials ({budget_source})")
    return run(spec, args, n_trials, sim_profile, study_name, study_dir, tracking_uri, storage)


class Terminated(KeyboardInterrupt):
    """SIGTERM (batch systems, `timeout`, `kill`): stop as cleanly as Ctrl-C does."""


TERMINATED = {"seen": False}  # Ray may re-raise the interrupt as a plain KeyboardInterrupt


@contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    def handler(signum: int, frame: FrameType | None) -> None:
        TERMINATED["seen"] = True
        raise Terminated()

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def parent_run_fields(
    spec: SweepSpec, args: argparse.Namespace, n_trials: int, study: str
) -> tuple[dict[str, str], dict[str, str]]:
    """The params and tags of the invocation's MLflow parent run: the spec's, and what each dataset gives
    a stage (the console's `dataset ...` lines, as figures and in words)."""
    from orchestrator.mlflow_schema import sweep_params, sweep_tags

    datasets = workload_counts(spec)  # read when the spec was checked
    return sweep_params(spec, args.spec, n_trials, datasets), sweep_tags(study, args.resume, datasets)


def resume_command(args: argparse.Namespace, study: str | None = None) -> str:
    """The whole command that continues this run's study: a bare `--resume` continues the spec's own
    study (its `name`), not the one `--study` named, and the stores are found by --out, --storage and
    --tracking-uri. The budget is the study's own (a plain --resume keeps it): --trials is left out,
    and --warm-start seeds new studies only."""
    argv = [args.spec, "--study", study or args.study]
    default_out = build_parser().get_default("out")
    if args.out != default_out:
        argv += ["--out", args.out]
    for flag in ("tracking_uri", "storage", "ray_address"):
        if getattr(args, flag) is not None:
            argv += ["--" + flag.replace("_", "-"), getattr(args, flag)]
    if args.time_budget is not None:
        argv += ["--time-budget", f"{args.time_budget:g}"]
    argv += ["--no-dashboard"] if args.no_dashboard else []
    argv += ["-v"] if args.verbose else []
    if os.environ.get("MAKELEVEL"):  # started by `make sweep`, whose python is the venv's
        return "make sweep ARGS=" + shlex.quote(shlex.join([*argv, "--resume"]))
    return shlex.join(["python", "-m", "orchestrator.sweep", *argv, "--resume"])


def search_and_confirm(
    sweep: Sweep, tracker: Tracker, lease: DriverLease, args: argparse.Namespace
) -> SweepOutcome | int:
    """Run the search and the confirmation; on Ctrl-C or SIGTERM the exit code, once what this driver
    holds is closed: its trials (`Sweep.run`: interrupted, re-queued), its lease, and its MLflow parent
    run (KILLED, with the reason as a tag; FAILED if the driver itself raised), and the command that
    continues has been printed."""
    ended: tuple[RunStatus, str] | None = (RunStatus.FAILED, "the driver raised")
    try:
        with terminate_as_interrupt():
            sweep.run()
            outcome = sweep.confirm_best()
        ended = None
    except KeyboardInterrupt as err:
        term = isinstance(err, Terminated) or TERMINATED["seen"]
        why = "terminated (SIGTERM)" if term else "interrupted"
        ended = (RunStatus.KILLED, f"{why}: the user stopped the driver")
        print(
            f"\n{why}: finished trials are recorded, running ones closed and queued again (not counted); "
            f"to continue:\n  {resume_command(args, tracker.experiment_name)}",
            file=sys.stderr,
        )
        return 143 if term else 130
    finally:
        lease.release()
        tracker.flush_spool()
        if tracker.pending_spool():
            print(
                f"warning: {tracker.pending_spool()} trial(s) still spooled in {tracker.spool_dir}; "
                "they are written on the next run",
                file=sys.stderr,
            )
        if ended is not None:
            status, reason = ended
            tracker.finish({}, [], status=status, tags={Tag.CLOSED_REASON.value: reason})
    return outcome


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
    from orchestrator.driver.answer.best_file import BestFile
    from orchestrator.driver.answer.conclusion import conclude
    from orchestrator.driver.answer.confirm import confirmation_note
    from orchestrator.driver.dispatch import cluster
    from orchestrator.driver.loop.outcome import StopReason
    from orchestrator.driver.loop.sweep import Sweep
    from orchestrator.driver.store.study import open_study
    from orchestrator.driver.store.study_lock import DriverLease, StudyInUse, current_driver
    from orchestrator.driver.store.tracking import Tracker
    from orchestrator.driver.store.trial_attrs import StudyAttr
    from orchestrator.mlflow_schema import LaunchParams

    info = cluster.connect(spec, args.ray_address, dashboard=not args.no_dashboard)
    shortfall = cluster.gpu_shortfall(spec)
    if shortfall:
        print(f"error: node.gpus: {shortfall}", file=sys.stderr)
        return 2
    missing = cluster.preflight_paths(spec)
    if missing:
        where = "; ".join(f"node {node[:12]}: {', '.join(paths)}" for node, paths in missing.items())
        print(
            f"error: model.path / model.draft_path: not found on the trial nodes ({where}); "
            "copy the model there or fix the spec",
            file=sys.stderr,
        )
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
    print(
        f"specsweep: study '{study_name}', {n_trials} trials, backend {spec.backend.value}, "
        f"{info.slots} node(s) with a trial slot"
    )
    for run_id in tracker.close_abandoned(study, before):
        print(f"  MLflow run {run_id} of an earlier driver that died without closing it: ended KILLED")
    for line in workload_lines(spec):  # read when the spec was checked: what each stage sends
        print(f"  {line}")
    if info.dashboard_url:
        print(f"  Ray dashboard (node health, running trials): {info.dashboard_url}")
        login = cluster.dashboard_login()
        if login:
            print(f"    {login}")
    print(f"  MLflow UI (compare trials): mlflow ui --backend-store-uri {tracking_uri} --host 127.0.0.1")
    print(f"  Optuna dashboard (live study): optuna-dashboard {storage}")
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
        print(
            f"  confirmation: {reserved} of the {left} launches left kept to relaunch the best "
            f"{spec.budget.confirm_top} configuration(s) ({spec.budget.confirm_repeats} launches each)"
        )
    elif confirmation_note(spec.budget, left):
        print(f"warning: {confirmation_note(spec.budget, left)}", file=sys.stderr)
    if short_stage_warning(spec):
        print(short_stage_warning(spec), file=sys.stderr)
    if args.warm_start and not args.resume:
        from orchestrator.driver.store.history import find_history, seed_study

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
    outcome = ended
    if tty:
        print()
    if outcome.stop_reason is StopReason.ANSWER_KNOWN:
        print(f"stopped early: {outcome.stop_detail}")
    elif outcome.stop_reason is not StopReason.BUDGET_DONE:
        print(
            f"stopped early: {outcome.stop_reason.explain()}; {outcome.progress.done} of {n_trials} "
            f"trials ran; to continue: {resume_command(args, study_name)}"
        )
    records = outcome.records
    rows = table_rows(study.get_trials(deepcopy=False), records)
    print(render_table(rows, budget=n_trials))
    earlier = BestFile.read(study_dir) if args.resume else None
    concluded = conclude(
        records, spec, study_dir, sweep.lossless.lossy, earlier, journal_complete=sweep.journal_complete
    )
    print("\n".join(concluded.lines))
    artifacts = list(concluded.written)
    report_path = study_dir / "report.html"
    try:
        from orchestrator.report import ReportError, write_report

        try:
            write_report(study_name, tracking_uri, storage, report_path)
            artifacts.append(report_path)
            print(f"report: {report_path}")
        except ReportError as err:
            print(f"warning: no report: {err}", file=sys.stderr)
    except Exception as err:  # a plot must never cost the sweep its results
        log.exception("report failed: %s", err)
    if tracker.experiment_id:
        make_store = tracking_uri == f"sqlite:///{Path('runs').resolve() / 'mlflow.db'}"
        print(ui_hint(tracking_uri, tracker.experiment_id, make_store))
    summary: dict[str, float | int] = dict(concluded.parent_metrics())
    # Counts are ints: MLflow stores every metric as a float, summary.json need not.
    counts = {"trials_recorded": len(rows), "trials_pruned_oom": outcome.progress.pruned_oom}
    tracker.finish({**summary, **counts}, artifacts, tags=concluded.parent_tags())
    (study_dir / "summary.json").write_text(json.dumps({**summary, **counts}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
