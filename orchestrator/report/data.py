"""The report's data: the trial runs read back from MLflow and shaped for tables and plots.

Everything here is pure except the few functions that read MLflow or the Optuna storage, so the
shaping (which sweep a trial belongs to, the Pareto front, the best so far, importances over a
conditional search space) is tested without a browser or a plot in sight.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from mlflow.entities import Run
from mlflow.tracking import MlflowClient

from orchestrator.errors import ErrorKind, SpecsweepError
from orchestrator.mlflow_schema import (
    SWEEP_KIND,
    Metric,
    Tag,
    is_sweep,
    parse_param,
)
from orchestrator.records import TrialStatus

log = logging.getLogger(__name__)


class ReportError(SpecsweepError):
    """The data for a report is missing (no such experiment, no trial)."""

    kind = ErrorKind.BAD_INPUT


class Outcome(StrEnum):
    """How the feasibility map draws a trial."""

    FEASIBLE = "feasible"
    OOM = "oom"  # ran out of memory: at start-up, under load, or retracting at its own limit
    PREDICTED_OOM = "predicted_oom"  # skipped by the memory model, never launched
    SLA_MISSED = "sla_missed"  # ran, but no stage met the spec's latency limits
    FAILED = "failed"  # crash, timeout, lost node: says nothing about memory
    INTERRUPTED = "interrupted"  # the driver was stopped while it ran: says nothing about the configuration


def outcome_of(status: str) -> Outcome:
    try:
        s = TrialStatus(status)
    except ValueError:
        return Outcome.FAILED
    if s is TrialStatus.OK:
        return Outcome.FEASIBLE
    if s is TrialStatus.PREDICTED_OOM:
        return Outcome.PREDICTED_OOM
    if s is TrialStatus.SLA_MISSED:
        return Outcome.SLA_MISSED
    if s is TrialStatus.INTERRUPTED:
        return Outcome.INTERRUPTED
    return Outcome.OOM if s.infeasible else Outcome.FAILED


@dataclass(frozen=True)
class RunReadBack:
    """One trial's MLflow run read back for the report; params parsed to numbers where they are numbers."""

    number: int
    run_id: str
    status: str
    config: str
    params: Mapping[str, float | str] = field(default_factory=dict)
    metrics: Mapping[str, float] = field(default_factory=dict)
    baseline: bool = False
    node_id: str = ""
    failure_stage: str = ""
    failure_kind: str = ""
    failure_message: str = ""
    diagnosis: str = ""
    pruned_at_stage: int | None = None
    start_time_ms: int = 0
    lossless: str = ""  # a Lossless value when the lossless check ran (budget.baseline)
    lossless_detail: str = ""
    server_version: str = ""  # the SGLang version that ran it: how its flags are spelled

    @property
    def outcome(self) -> Outcome:
        return outcome_of(self.status)

    @property
    def tok_s(self) -> float | None:
        return self.metrics.get(Metric.OUTPUT_TOK_PER_S)

    @property
    def objective(self) -> float | None:
        return self.metrics.get(Metric.OBJECTIVE)

    @property
    def accept_length(self) -> float | None:
        return self.metrics.get(Metric.ACCEPT_LENGTH)

    def value(self, name: str) -> float | None:
        """A numeric param, else a metric, else None."""
        param = self.params.get(name)
        if isinstance(param, int | float):
            return float(param)
        return self.metrics.get(name)


def current_sweeps(parents: Sequence[tuple[str, int, bool]]) -> set[str]:
    """The parent runs of the study as it is now, from (run_id, start_time_ms, resumed) triples.

    A sweep without --resume deletes and recreates the Optuna study, so trial numbers start again at 0
    while the MLflow experiment keeps the older runs: the current study is the newest parent run and
    the parents it resumed, back to the first one that was not a resume.
    """
    chosen: set[str] = set()
    for run_id, _start, resumed in sorted(parents, key=lambda p: p[1], reverse=True):
        chosen.add(run_id)
        if not resumed:
            break
    return chosen


def rows_from_runs(runs: Sequence[Run]) -> list[RunReadBack]:
    """The trial runs of the current study, one per trial number (the newest wins), by number."""
    parents = [
        (r.info.run_id, r.info.start_time or 0, r.data.tags.get(Tag.RESUME) == "true")
        for r in runs
        if is_sweep(r.data.tags)
    ]
    current = current_sweeps(parents)
    by_number: dict[int, RunReadBack] = {}
    for run in runs:
        tags = run.data.tags
        if is_sweep(tags):
            continue
        if parents and tags.get(Tag.PARENT_RUN) not in current:
            continue
        try:
            number = int(tags[Tag.TRIAL_NUMBER])
        except (KeyError, ValueError):
            log.warning("run %s has no %s tag; left out", run.info.run_id, Tag.TRIAL_NUMBER.value)
            continue
        pruned = tags.get(Tag.PRUNED_AT_STAGE)
        row = RunReadBack(
            number=number,
            run_id=run.info.run_id,
            status=tags.get(Tag.STATUS, TrialStatus.FAILED.value),
            config=tags.get(Tag.CONFIG, ""),
            params={k: parse_param(v) for k, v in run.data.params.items()},
            metrics={k: float(v) for k, v in run.data.metrics.items()},
            baseline=tags.get(Tag.BASELINE) == "true",
            node_id=tags.get(Tag.NODE_ID, ""),
            failure_stage=tags.get(Tag.FAILURE_STAGE, ""),
            failure_kind=tags.get(Tag.FAILURE_KIND, ""),
            failure_message=tags.get(Tag.FAILURE_MESSAGE, ""),
            diagnosis=tags.get(Tag.DIAGNOSIS, ""),
            pruned_at_stage=int(pruned) if pruned and pruned.isdigit() else None,
            start_time_ms=run.info.start_time or 0,
            lossless=tags.get(Tag.LOSSLESS, ""),
            lossless_detail=tags.get(Tag.LOSSLESS_DETAIL, ""),
            server_version=tags.get(Tag.SERVER_VERSION, ""),
        )
        old = by_number.get(number)
        if old is None or row.start_time_ms >= old.start_time_ms:
            by_number[number] = row
    return [by_number[n] for n in sorted(by_number)]


def sqlite_missing(url: str) -> bool:
    """True for an SQLite URL whose file does not exist: opening it would create an empty store."""
    prefix = "sqlite:///"
    return url.startswith(prefix) and not Path(url[len(prefix) :]).exists()


def load_workload(tracking_uri: str, experiment: str) -> list[str]:
    """What each dataset gave a stage, in the console's words (`dataset ...: 16 requests from 68
    conversations, 1 skipped (1 empty conversation)`), from the newest sweep run that recorded them."""
    client = MlflowClient(tracking_uri=tracking_uri)
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        return []
    runs = client.search_runs(
        [exp.experiment_id],
        filter_string=f"tags.`{Tag.KIND.value}` = '{SWEEP_KIND}'",
        order_by=["attributes.start_time DESC"],
        max_results=50,
    )
    for run in runs:
        text = run.data.tags.get(Tag.DATASET_COUNTS)
        if text:
            return text.splitlines()
    return []


def load_trials(tracking_uri: str, experiment: str) -> list[RunReadBack]:
    if sqlite_missing(tracking_uri):
        raise ReportError(f"no MLflow store at {tracking_uri}")
    client = MlflowClient(tracking_uri=tracking_uri)
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        here = sorted(e.name for e in client.search_experiments() if e.name != "Default")
        raise ReportError(
            f"no MLflow experiment named {experiment!r} at {tracking_uri}"
            + (f" (studies here: {', '.join(here)})" if here else ""),
            hint="a study swept with --out DIR is reported with --out DIR",
        )
    runs: list[Run] = []
    token: str | None = None
    while True:
        page = client.search_runs([exp.experiment_id], max_results=1000, page_token=token)
        runs.extend(page)
        token = page.token
        if not token:
            break
    return rows_from_runs(runs)


# -- shaping ---------------------------------------------------------------------------------------------


def pareto_front(points: Sequence[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point beats, as (latency: lower is better, tok/s: higher is
    better), ordered by latency. Equal points are all kept: neither dominates the other."""

    def dominated(i: int) -> bool:
        lat, tok = points[i]
        return any(
            (o_lat <= lat and o_tok >= tok) and (o_lat < lat or o_tok > tok) for o_lat, o_tok in points
        )

    front = [i for i in range(len(points)) if not dominated(i)]
    return sorted(front, key=lambda i: (points[i][0], -points[i][1]))


def best_so_far(values: Sequence[float | None]) -> list[float | None]:
    """Running maximum; None until the first value."""
    out: list[float | None] = []
    best: float | None = None
    for v in values:
        if v is not None and (best is None or v > best):
            best = v
        out.append(best)
    return out
