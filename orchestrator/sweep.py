"""`python -m orchestrator.sweep [SPEC]`: run a sweep and say where to watch it.

With no arguments it runs `trials/demo.yaml` against the embedded simulated node on a local Ray
instance, writing everything under `runs/`.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

from orchestrator.records import TrialStatus
from orchestrator.spec import Backend, SpecError, SweepSpec, load_spec
from orchestrator.summary import best_record, render_table, write_best
from orchestrator.tracking import TrialRecord

log = logging.getLogger("orchestrator")
DEFAULT_SPEC = Path("trials/demo.yaml")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m orchestrator.sweep",
        description="Find the fastest SGLang + EAGLE-3 configuration: Optuna proposes, Ray runs one trial "
        "per whole node, MLflow records every trial.",
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


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    for noisy in ("alembic", "mlflow", "optuna"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    try:
        spec = load_spec(args.spec)
        n_trials = args.trials if args.trials is not None else spec.budget.trials
        if n_trials < 1:
            raise SpecError("--trials: must be at least 1")
        sim_profile = resolve_profile(spec)
    except SpecError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    out = Path(args.out).resolve()
    study_name = args.study or spec.name
    study_dir = out / study_name
    study_dir.mkdir(parents=True, exist_ok=True)
    tracking_uri = args.tracking_uri or f"sqlite:///{out / 'mlflow.db'}"
    storage = args.storage or f"sqlite:///{out / 'optuna.db'}"
    return run(spec, args, n_trials, sim_profile, study_name, study_dir, tracking_uri, storage)


def resolve_profile(spec: SweepSpec) -> dict[str, Any] | None:
    if spec.backend is not Backend.SIMULATED:
        return None
    from orchestrator.sim.profile import SimProfile, load_profile

    assert spec.simulated is not None
    try:
        source = spec.simulated.profile
        profile = SimProfile.model_validate(source) if isinstance(source, dict) else load_profile(source)
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
    from orchestrator import cluster
    from orchestrator.diagnosis import check_draft_config
    from orchestrator.study import Progress, Sweep, open_study
    from orchestrator.tracking import Tracker

    warning = check_draft_config(spec.model.draft_path, spec.model.speculative_algorithm)
    if warning:
        print(f"error: model.speculative_algorithm: {warning}", file=sys.stderr)
        return 2
    info = cluster.connect(spec, args.ray_address, dashboard=not args.no_dashboard)
    missing = cluster.preflight_paths(spec)
    if missing:
        where = "; ".join(f"node {node[:12]}: {', '.join(paths)}" for node, paths in missing.items())
        print(
            f"error: model.path / model.draft_path: not found on the trial nodes ({where}); "
            "copy the model there or fix the spec",
            file=sys.stderr,
        )
        return 2
    study = open_study(spec, study_name, storage, args.resume)
    local_store = tracking_uri.startswith(("sqlite:", "file:")) or "://" not in tracking_uri
    artifacts_dir = study_dir.parent / "mlartifacts" / study_name if local_store else None
    tracker = Tracker(tracking_uri, study_name, study_dir / "spool", artifacts_dir)
    tracker.start(
        run_name=f"sweep {time.strftime('%Y-%m-%d %H:%M:%S')}",
        params={
            "spec": args.spec,
            "backend": spec.backend.value,
            "gpus_per_node": str(spec.node.gpus),
            "model_path": spec.model.path,
            "draft_model_path": spec.model.draft_path,
            "trials": str(n_trials),
        },
        tags={"study": study_name, "resume": str(args.resume).lower()},
    )
    print(
        f"specsweep: study '{study_name}', {n_trials} trials, backend {spec.backend.value}, "
        f"{info.slots} node(s) with a trial slot"
    )
    if info.dashboard_url:
        print(f"  Ray dashboard (node health, running trials): {info.dashboard_url}")
    print(f"  MLflow UI (compare trials): mlflow ui --backend-store-uri {tracking_uri} --host 127.0.0.1")
    print(f"  Optuna dashboard (live study): optuna-dashboard {storage}")
    tty = sys.stdout.isatty()

    def show(p: Progress) -> None:
        best = f"{p.best_tok_s:.1f} tok/s (trial {p.best_number})" if p.best_tok_s else "-"
        line = (
            f"  [{p.done}/{n_trials} done, {p.running} running, {p.pruned_oom} pruned for OOM, "
            f"{p.failed} failed] best {best}"
        )
        if tty:
            print("\r" + line.ljust(100), end="", flush=True)

    def record(r: TrialRecord) -> None:
        res = r.result
        tok = f"{res.output_tok_per_s:8.1f} tok/s" if res.output_tok_per_s else " " * 14
        msg = f"  trial {r.number:3d} {res.status.value:<14} {tok}  {res.config.label()}"
        if res.failure is not None and res.status is not TrialStatus.OK:
            msg += f"  [{res.failure.stage.value}: {res.failure.message[:80]}]"
        if r.diagnosis.startswith("broken_speculation"):
            msg += "\n  !!! BROKEN SPECULATION: " + r.diagnosis
        print(("\r" if tty else "") + msg.ljust(100), flush=True)

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
    )
    sweep.prepare(args.resume)
    if args.warm_start and not args.resume:
        from orchestrator.history import find_history, seed_study

        past = find_history(tracking_uri, spec, exclude=study_name)
        counts = seed_study(study, spec.search, past, sweep.model)
        print(
            f"  warm start from {len({p.experiment for p in past})} earlier study(ies): "
            f"{counts['infeasible']} OOM(s) and {counts['feasible']} result(s) learned, "
            f"{counts['enqueued']} best configuration(s) queued, memory model "
            f"{'ready' if sweep.model.ready else 'not ready'}"
        )
    failed = True
    try:
        outcome = sweep.run()
        failed = False
    except KeyboardInterrupt:
        print("\ninterrupted: finished trials are recorded; continue with --resume", file=sys.stderr)
        return 130
    finally:
        tracker.flush_spool()
        if tracker.pending_spool():
            print(
                f"warning: {tracker.pending_spool()} trial(s) still spooled in {tracker.spool_dir}; "
                "they are written on the next run",
                file=sys.stderr,
            )
        if failed:
            tracker.finish({}, [], failed=True)
    if tty:
        print()
    records = outcome.records
    print(render_table(records))
    best = best_record(records)
    artifacts = []
    if best is None:
        print("no configuration completed; see the failures above and the server logs in MLflow")
    else:
        paths = write_best(best, spec, study_dir)
        artifacts.extend(paths)
        cmd = (study_dir / "best_command.sh").read_text()
        tok_s = best.result.output_tok_per_s or 0.0
        print(f"\nbest: trial {best.number}, {tok_s:.1f} tok/s, {best.result.config.label()}")
        print(f"SGLang launch command (also in {study_dir / 'best_command.sh'}):\n{cmd}")
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
    summary = {"best_output_tok_per_s": best.result.output_tok_per_s or 0.0} if best else {}
    summary["trials_recorded"] = float(len(records))
    summary["trials_pruned_oom"] = float(outcome.progress.pruned_oom)
    tracker.finish(summary, artifacts)
    (study_dir / "summary.json").write_text(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
