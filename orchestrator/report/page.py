"""The report's page: one self-contained HTML page about a study (`python -m orchestrator.report STUDY`).

It reads the trial runs back from MLflow (and the Optuna study for importances), so it can be made
again at any time, for a finished study or one still running, on a machine with no network: plotly.js
is embedded once in the page.
"""

from __future__ import annotations

import argparse
import html
import logging
import os
import sys
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import plotly.io as pio
from plotly.offline import get_plotlyjs

from orchestrator.driver.store.commands import module_command, tool_command
from orchestrator.records import TrialRecord
from orchestrator.report.answer import BestConfig, find_best, journal_records
from orchestrator.report.data import (
    ReportError,
    RunReadBack,
    best_so_far,
    load_trials,
    load_workload,
    pareto_front,
)
from orchestrator.report.importances import Importances, study_importances
from orchestrator.report.plots import (
    acceptance_figure,
    feasibility_figure,
    history_figure,
    importance_figure,
    latency_figure,
)
from orchestrator.report.sections import best_section, memory_section, traffic_section, trials_section

__all__ = [
    "ReportError",
    "RunReadBack",
    "best_so_far",
    "load_trials",
    "pareto_front",
    "render_html",
    "write_report",
]
log = logging.getLogger(__name__)

CSS = """
body { font-family: system-ui, sans-serif; margin: 24px auto; max-width: 1360px; color: #222; }
h1 { margin-bottom: 4px; } h2 { border-bottom: 1px solid #ddd; padding-bottom: 4px; margin-top: 36px; }
table { border-collapse: collapse; font-size: 13px; } td, th { border: 1px solid #ddd; padding: 3px 8px; }
th { background: #f4f4f4; text-align: left; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
pre { background: #f6f8fa; padding: 12px; overflow-x: auto; font-size: 13px; }
.note { color: #666; font-style: italic; } .muted { color: #666; }
tr.feasible td:nth-child(2) { color: #1a7f37; } tr.oom td:nth-child(2) { color: #d62728; }
tr.predicted_oom td:nth-child(2) { color: #e36209; } tr.failed td:nth-child(2) { color: #666; }
div.msg { max-width: 520px; font-size: 12px; }
p.bad, tr.bad td { color: #d62728; }
"""


def _e(value: object) -> str:
    return html.escape(str(value))


def _plot(fig: object, div_id: str) -> str:
    height = getattr(getattr(fig, "layout", None), "height", None) or 450
    return str(
        pio.to_html(
            fig,
            full_html=False,
            include_plotlyjs=False,  # embedded once in <head>
            div_id=div_id,
            default_height=f"{height}px",
            config={"displaylogo": False, "responsive": True},
        )
    )


def render_html(
    study_name: str,
    rows: Sequence[RunReadBack],
    best: BestConfig | None,
    importances: Importances,
    workload: Sequence[str] = (),
    records: Sequence[TrialRecord] = (),
) -> str:
    """The page; ``workload``: what each dataset gave a stage, the console's lines (`load_workload`);
    ``records``: the sweep's journal of these runs, which ranks the answer so far as the sweep did."""
    counts = Counter(r.status for r in rows)
    summary = ", ".join(f"{n} {_e(s)}" for s, n in counts.most_common())
    importance = ""
    if importances.values:
        importance = _plot(importance_figure(importances.values), "plot-importance")
    sections = [
        ("best", "Best configuration", best_section(best)),
        ("memory", "Memory account of the best trial", memory_section(best)),
        (
            "feasibility",
            "Feasibility map",
            "<p>Where the searched values ran out of memory. Feasible trials are coloured by output "
            "tok/s; an OOM at start-up, under load or from KV pressure is a red cross, a configuration "
            "the memory model skipped an orange diamond, any other failure a grey square. Where trials "
            "with different outcomes share a pair of values, their markers stand side by side at that "
            "value (the hover names each trial), and a number over a marker counts the trials of that "
            "outcome there.</p>" + _plot(feasibility_figure(rows), "plot-feasibility"),
        ),
        ("latency", "Throughput against tail latency", _plot(latency_figure(rows), "plot-pareto")),
        ("acceptance", "Acceptance length", _plot(acceptance_figure(rows), "plot-acceptance")),
        ("traffic", "Traffic, speculation policy and the lossless check", traffic_section(rows)),
        (
            "history",
            "Optimisation history",
            "<p>Each trial's output tok/s, and the sweep's answer after each trial: chosen by the answer's "
            "own rule (the median of a configuration's launches, ranked with the noise and the speculation "
            "model), not the highest launch so far, so the line falls where a repeat measures lower or "
            "the ranking changes its pick.</p>" + _plot(history_figure(rows, records), "plot-history"),
        ),
        (
            "importance",
            "Parameter importances",
            f'<p class="note">{_e(importances.note)}</p>{importance}',
        ),
        ("trials", f"All trials ({len(rows)})", trials_section(rows)),
    ]
    body = "\n".join(
        f'<section id="{sid}"><h2>{_e(title)}</h2>\n{inner}</section>' for sid, title, inner in sections
    )
    generated = time.strftime("%Y-%m-%d %H:%M:%S")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>specsweep report: {_e(study_name)}</title>
<style>{CSS}</style>
<script type="text/javascript">{get_plotlyjs()}</script>
</head><body>
<h1>specsweep report: {_e(study_name)}</h1>
<p class="muted">{len(rows)} trials: {summary or "none"}. Generated {generated}.</p>
{"".join(f'<p class="muted workload">{_e(line)}</p>' for line in workload)}
{body}
</body></html>
"""


def write_report(study_name: str, tracking_uri: str, storage: str, out_path: Path) -> Path:
    """Write the report of `study_name` to `out_path`; the best.json next to it is used when present.

    Raises ReportError when MLflow has no experiment of that name.
    """
    rows = load_trials(tracking_uri, study_name)
    records = journal_records(rows, out_path.parent)
    best = find_best(rows, out_path.parent, tracking_uri, records)
    importances = study_importances(study_name, storage)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    workload = load_workload(tracking_uri, study_name)
    page = render_html(study_name, rows, best, importances, workload, records)
    out_path.write_text(page, encoding="utf-8")
    log.info("report of %d trials written to %s", len(rows), out_path)
    return out_path


def last_study(storage: str) -> str:
    """The study run last (`make report` with no STUDY=): the one whose latest trial started or ended last.

    Not the one whose first trial is latest: a `--resume` of an older study (the command the console
    prints) is the last run, though another study was created after it."""
    if storage.startswith("sqlite:///") and not Path(storage.removeprefix("sqlite:///")).is_file():
        raise ReportError(f"no study in {storage}: run a sweep first, or give --out / --storage")
    import optuna

    summaries = optuna.get_all_study_summaries(storage, include_best_trial=False)
    if not summaries:
        raise ReportError(f"no study in {storage}: run a sweep first")
    store = optuna.storages.get_storage(storage)

    def last_activity(s: optuna.study.StudySummary) -> float:
        study_id = store.get_study_id_from_name(s.study_name)
        moments = [
            moment.timestamp()
            for t in store.get_all_trials(study_id, deepcopy=False)
            for moment in (t.datetime_start, t.datetime_complete)
            if moment is not None
        ]
        return max(moments, default=0.0)

    return max(summaries, key=last_activity).study_name


def another_study_command(prog: str) -> str:
    """The command that reports another study, as it runs with no venv activated: the installed script
    beside this interpreter when the user typed `specsweep report`, else this interpreter with the module."""
    if prog.startswith("specsweep"):
        return tool_command("specsweep", "report", "NAME")
    return module_command("orchestrator.report", "NAME")


def main(argv: list[str] | None = None, prog: str = "python -m orchestrator.report") -> int:
    p = argparse.ArgumentParser(prog=prog, description="Write a study's HTML report (opens offline).")
    p.add_argument(
        "study",
        nargs="?",
        default=None,
        help="study name (the Optuna study and the MLflow experiment); default: the last study run",
    )
    p.add_argument("--out", default="runs", help="runs folder; writes OUT/STUDY/report.html (default: runs)")
    p.add_argument(
        "--tracking-uri", default=None, help="MLflow tracking URI (default: sqlite:///OUT/mlflow.db)"
    )
    p.add_argument("--storage", default=None, help="Optuna storage URL (default: sqlite:///OUT/optuna.db)")
    args = p.parse_args(argv)
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    for noisy in ("alembic", "mlflow", "optuna"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    out = Path(args.out).resolve()
    tracking_uri = args.tracking_uri or f"sqlite:///{out / 'mlflow.db'}"
    storage = args.storage or f"sqlite:///{out / 'optuna.db'}"
    try:
        study = args.study or last_study(storage)
        if args.study is None:
            # Under `make report` the study goes in STUDY=.
            again = "make report STUDY=NAME" if os.environ.get("MAKELEVEL") else another_study_command(prog)
            print(f"report of the last study run, '{study}' (name another: {again})", file=sys.stderr)
        path = write_report(study, tracking_uri, storage, out / study / "report.html")
    except ReportError as err:  # bad input (an unknown study, no store): exit 2, as the sweep's own
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(path)
    return 0
