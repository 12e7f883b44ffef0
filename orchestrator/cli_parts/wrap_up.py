"""A sweep's end: why it stopped, the trial table, the answer (`driver.answer.conclusion.conclude`), the
report, and the parent MLflow run's figures and `summary.json`."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.cli_parts.stopping import resume_command
from orchestrator.driver.answer.summary import render_table, table_rows
from orchestrator.driver.store.commands import module_command
from orchestrator.driver.store.tracking import ui_hint
from orchestrator.spec.sweep_spec import BudgetSpec, SweepSpec

if TYPE_CHECKING:
    import optuna

    from orchestrator.driver.loop.outcome import SweepOutcome
    from orchestrator.driver.loop.sweep import Sweep
    from orchestrator.driver.store.tracking import Tracker

log = logging.getLogger("orchestrator")  # the CLI's own logger, as `orchestrator.cli` names it


def unconfirmed_note(
    launches: int,
    nospec: bool,
    budget: BudgetSpec,
    reserved: int,
    more: Callable[[int], str],
    searched: int = 0,
) -> str:
    """Why a speculative answer has fewer launches than ``budget.confirm_repeats``, and the command that
    gives it the rest (``more``: the command for so many more trials); '' otherwise. Where launches were
    kept (``reserved``), the confirmation relaunched the configuration ranked first before it, and that
    relaunch measured lower; where none were, the budget (``searched`` launches) was too small to keep
    them beside half for the search, and the command's budget holds both."""
    missing = budget.confirm_repeats - launches
    want = budget.confirm_top * (budget.confirm_repeats - 1)
    if nospec or missing <= 0 or want <= 0:
        return ""
    if reserved <= 0:
        # `confirm.reserved_launches` keeps them only within half of the whole budget, the resumed one too.
        extra = max(want, 2 * want - searched)
        return (
            f"note: the answer stands on {launches} launch{'es' if launches > 1 else ''}: this budget kept "
            f"none to confirm it (budget.confirm_top {budget.confirm_top} configurations to "
            f"budget.confirm_repeats {budget.confirm_repeats} launches each, while half the budget stays "
            f"with the search); to confirm it: {more(extra)}"
        )
    return (
        f"note: the answer stands on {launches} launch{'es' if launches > 1 else ''}, fewer than the "
        f"{budget.confirm_repeats} the confirmation asks for: the launches kept for it went to the "
        "configurations ranked first before them, which their relaunches moved behind; to confirm it: "
        f"{more(missing)}"
    )


def report_command(study_name: str, out: Path, tracking_uri: str, storage: str) -> str:
    """The command that writes a study's report later, naming only what is not its default."""
    parts = [study_name, "--out", str(out)]
    if tracking_uri != f"sqlite:///{out / 'mlflow.db'}":
        parts += ["--tracking-uri", tracking_uri]
    if storage != f"sqlite:///{out / 'optuna.db'}":
        parts += ["--storage", storage]
    return module_command("orchestrator.report", *parts)


def wrap_up(
    outcome: SweepOutcome,
    sweep: Sweep,
    study: optuna.Study,
    tracker: Tracker,
    spec: SweepSpec,
    args: argparse.Namespace,
    n_trials: int,
    study_name: str,
    study_dir: Path,
    tracking_uri: str,
    storage: str,
    tty: bool,
) -> int:
    """Print and write what a finished sweep leaves; the exit code (0)."""
    from orchestrator.driver.answer.best_file import BestFile
    from orchestrator.driver.answer.conclusion import conclude
    from orchestrator.driver.loop.outcome import StopReason
    from orchestrator.driver.store.study import confirmation_count

    if tty:
        print()
    if outcome.stop_reason is StopReason.ANSWER_KNOWN:
        print(f"stopped early: {outcome.stop_detail}")
    elif outcome.stop_reason is not StopReason.BUDGET_DONE:
        detail = f", {outcome.stop_detail}" if outcome.stop_detail else ""
        print(
            f"stopped early: {outcome.stop_reason.explain()}{detail}; {outcome.progress.done} of "
            f"{n_trials} trials ran; to continue: {resume_command(args, study_name)}"
        )
    records = outcome.records
    rows = table_rows(study.get_trials(deepcopy=False), records)
    print(render_table(rows, budget=n_trials))
    if outcome.confirm_note:
        print(outcome.confirm_note)
    earlier = BestFile.read(study_dir) if args.resume else None
    concluded = conclude(
        records, spec, study_dir, sweep.lossless.lossy, earlier, journal_complete=sweep.journal_complete
    )
    lines = list(concluded.lines)
    if concluded.best is not None and outcome.stop_reason in (
        StopReason.BUDGET_DONE,
        StopReason.ANSWER_KNOWN,
    ):
        note = unconfirmed_note(
            len(concluded.best.launches),
            concluded.best.nospec,
            spec.budget,
            # an earlier invocation's confirmation counts as kept: its launches went elsewhere
            sweep.confirm_reserve or confirmation_count(study),
            lambda missing: resume_command(args, study_name, trials=n_trials + missing),
            searched=n_trials,
        )
        if note:  # beside the confidence it qualifies
            at = next((i + 1 for i, line in enumerate(lines) if line.startswith("confidence:")), len(lines))
            lines.insert(at, note)
    print("\n".join(lines))
    if concluded.best is not None:
        from orchestrator.driver.answer.study_answer import record_answer

        record_answer(study, concluded.best)
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
        except KeyboardInterrupt:
            # Ctrl-C while the page is drawn (a large study's importances take seconds): skip it, and
            # still close the parent run and write summary.json below; the results are all recorded.
            again = report_command(study_name, study_dir.parent, tracking_uri, storage)
            print(f"report skipped (interrupted): write it with `{again}`")
    except Exception as err:  # a plot must never cost the sweep its results
        log.exception("report failed: %s", err)
    if tracker.experiment_id:
        print(ui_hint(tracking_uri, tracker.experiment_id))
    summary: dict[str, float | int] = dict(concluded.parent_metrics())
    # Counts are ints: MLflow stores every metric as a float, summary.json need not.
    counts = {"trials_recorded": len(rows), "trials_pruned_oom": outcome.progress.pruned_oom}
    tracker.finish({**summary, **counts}, artifacts, tags=concluded.parent_tags())
    (study_dir / "summary.json").write_text(json.dumps({**summary, **counts}, indent=1))
    return 0
