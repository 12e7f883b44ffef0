"""MLflow: one experiment per study, a parent run per invocation, a nested run per trial.

Only the driver writes here, under the names and in the shapes `mlflow_schema` gives. If the tracking
server is unreachable, the record is spooled on disk and written when it answers again: nothing that ran
is lost.
"""

from __future__ import annotations

import logging
import pickle
import tempfile
import time
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING

from mlflow.entities import Metric, Param, RunTag
from mlflow.tracking import MlflowClient

from orchestrator import mlflow_schema as schema
from orchestrator.driver.store.commands import make_target_serves, mlflow_ui_command
from orchestrator.driver.store.trial_attrs import StudyAttr
from orchestrator.mlflow_schema import LaunchParams
from orchestrator.records import TrialRecord, TrialResult, TrialStatus

if TYPE_CHECKING:
    import optuna

    from orchestrator.driver.store.study_lock import DriverStamp

log = logging.getLogger(__name__)


class RunStatus(StrEnum):
    """An MLflow run's status (MLflow's own names)."""

    RUNNING = "RUNNING"
    FINISHED = "FINISHED"
    FAILED = "FAILED"
    KILLED = "KILLED"  # stopped by the user (Ctrl-C, SIGTERM), or its driver died and the next closed it


def runs_url(ui_base: str, experiment_id: str) -> str:
    """The experiment's training-runs page in the MLflow UI (not its GenAI overview of traces)."""
    return f"{ui_base.rstrip('/')}/#/experiments/{experiment_id}?workflowType=machine_learning"


def ui_hint(tracking_uri: str, experiment_id: str) -> str:
    """Where to see the study's trials: `make mlflow-ui`'s link only where that target opens this store
    (in the checkout, its runs/mlflow.db); for any other store or folder the command that opens this one,
    with the executable a new user's shell finds (`driver.store.commands`)."""
    if tracking_uri.startswith(("http://", "https://")):
        return "trials in MLflow: " + runs_url(tracking_uri, experiment_id)
    url = runs_url("http://127.0.0.1:5000", experiment_id)
    if make_target_serves(tracking_uri):
        return f"trials in MLflow (after `make mlflow-ui`): {url}"
    return f"trials in MLflow (after `{mlflow_ui_command(tracking_uri, port=5000)}`): {url}"


class Tracker:
    def __init__(
        self,
        tracking_uri: str,
        experiment: str,
        spool_dir: Path,
        artifact_root: Path | None = None,
        launch: LaunchParams | None = None,
    ) -> None:
        self.client = MlflowClient(tracking_uri=tracking_uri)
        self.tracking_uri = tracking_uri
        self.experiment_name = experiment
        self.spool_dir = spool_dir
        self.spool_dir.mkdir(parents=True, exist_ok=True)
        self.experiment_id = ""
        self.parent_run_id = ""
        self._run_ids: dict[int, str] = {}
        # Trials filed under another parent run than this invocation's: those a dead driver launched.
        self._parents: dict[int, str] = {}
        self.previous_parent_run_id = ""  # the study's parent run before this one (`close_abandoned`)
        # With a local store MLflow would put artifacts in ./mlruns of whatever folder the driver ran
        # in; they belong next to the database. A tracking server chooses for itself.
        self.artifact_root = artifact_root
        self.launch = launch  # the spec's share of each launched trial's params

    def start(self, run_name: str, params: dict[str, str], tags: dict[str, str]) -> str:
        existing = self.client.get_experiment_by_name(self.experiment_name)
        self.experiment_id = (
            existing.experiment_id
            if existing
            else self.client.create_experiment(
                self.experiment_name,
                artifact_location=self.artifact_root.resolve().as_uri() if self.artifact_root else None,
                tags=schema.EXPERIMENT_TAGS,
            )
        )
        for key, value in schema.EXPERIMENT_TAGS.items():
            if existing is not None and existing.tags.get(key) != value:  # made before these tags existed
                self.client.set_experiment_tag(self.experiment_id, key, value)
        run = self.client.create_run(
            self.experiment_id, run_name=run_name, tags={schema.Tag.KIND.value: schema.SWEEP_KIND, **tags}
        )
        self.parent_run_id = run.info.run_id
        self.client.log_batch(
            self.parent_run_id, params=[Param(k, str(v)[: schema.PARAM_LIMIT]) for k, v in params.items()]
        )
        return self.parent_run_id

    def file_under(self, number: int, parent_run_id: str) -> None:
        """Write trial ``number`` under ``parent_run_id`` rather than this invocation's parent run: a trial
        a dead driver launched belongs to that driver's sweep, whose run this one closed."""
        if parent_run_id:
            self._parents[number] = parent_run_id

    def run_id_of(self, number: int) -> str | None:
        """The MLflow run of a trial: written by this tracker, or on --resume by an earlier driver's
        (found by its trial-number tag; the latest if a half-written one was left). None while spooled."""
        if number not in self._run_ids and self.experiment_id:
            runs = self.client.search_runs(
                [self.experiment_id],
                filter_string=f"tags.`{schema.Tag.TRIAL_NUMBER.value}` = '{number}'",
                order_by=["attributes.start_time DESC"],
                max_results=1,
            )
            if runs:
                self._run_ids[number] = runs[0].info.run_id
        return self._run_ids.get(number)

    def log_trial(self, record: TrialRecord) -> str | None:
        """Write one trial; on failure spool it, so it is written by a later `flush_spool`."""
        self.flush_spool()
        try:
            return self._write_trial(record)
        except Exception as err:  # the tracking server may be down for a while
            path = self.spool_dir / f"trial-{record.number:05d}.pkl"
            path.write_bytes(pickle.dumps(record))
            log.warning("MLflow unreachable (%s); trial %d spooled to %s", err, record.number, path)
            return None

    def flush_spool(self) -> int:
        written = 0
        for path in sorted(self.spool_dir.glob("trial-*.pkl")):
            record: TrialRecord = pickle.loads(path.read_bytes())
            try:
                self._write_trial(record)
            except Exception:
                return written
            path.unlink()
            written += 1
        if written:
            log.info("wrote %d spooled trial(s) to MLflow", written)
        return written

    def pending_spool(self) -> int:
        return len(list(self.spool_dir.glob("trial-*.pkl")))

    def _write_trial(self, record: TrialRecord) -> str:
        r = record.result
        tags = schema.trial_tags(record, self._parents.get(record.number, self.parent_run_id))
        # The run spans the launch on its node (opened and closed as it was written, every run's Duration
        # read ~30 ms); a configuration never launched keeps the moment it was judged.
        start, end = _span_ms(r)
        run = self.client.create_run(
            self.experiment_id, start_time=start, run_name=_run_name(record), tags=tags
        )
        run_id = run.info.run_id
        self._run_ids[record.number] = run_id
        metrics = [Metric(k, float(v), 0, 0) for k, v in schema.trial_metrics(record).items()]
        metrics += [Metric(k, v, 0, step) for k, v, step in schema.stage_series(r)]
        self.client.log_batch(
            run_id,
            metrics=metrics,
            params=[Param(k, v) for k, v in schema.trial_params(r, self.launch).items()],
            tags=[RunTag(schema.Tag.NOTE.value, _note(record))],
        )
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            for name, text in schema.trial_artifacts(r).items():
                (folder / name).write_text(text)
            self.client.log_artifacts(run_id, str(folder))
        self.client.set_terminated(run_id, status=_run_status(r.status).value, end_time=end)
        return run_id

    def close_abandoned(self, study: optuna.Study, dead: DriverStamp | None) -> list[str]:
        """Record this invocation's parent run in the study, and end KILLED, with a tag saying why, the
        runs an earlier driver of the study left RUNNING (kill -9, a machine gone: it never closed them).
        Call it holding the study's lease: no other live driver has a run of it open. Returns the parent
        runs closed."""
        earlier = [str(r) for r in study.user_attrs.get(StudyAttr.MLFLOW_RUNS) or []]
        # With the lease held, the invocation before this one is the only driver that could have left a
        # trial running: the trials closed as interrupted are filed under its run (`file_under`).
        self.previous_parent_run_id = earlier[-1] if earlier else ""
        study.set_user_attr(StudyAttr.MLFLOW_RUNS, [*earlier, self.parent_run_id])
        whose = f"its driver ({dead.describe()})" if dead is not None else "its driver"
        why = (
            f"{whose} stopped without closing this run (killed, or its machine went down); closed by the "
            f"next driver on the study, at {time.strftime('%Y-%m-%d %H:%M:%S')}"
        )
        closed: list[str] = []
        for run_id in earlier:
            if run_id == self.parent_run_id:
                continue
            try:
                if self.client.get_run(run_id).info.status != RunStatus.RUNNING.value:
                    continue
                # Its trial runs too: one may have been half written when the driver died.
                children = self.client.search_runs(
                    [self.experiment_id],
                    filter_string=f"tags.`{schema.Tag.PARENT_RUN.value}` = '{run_id}' "
                    "and attributes.status = 'RUNNING'",
                )
                for run in [*children, self.client.get_run(run_id)]:
                    self.client.set_tag(run.info.run_id, schema.Tag.CLOSED_REASON.value, why)
                    self.client.set_terminated(run.info.run_id, status=RunStatus.KILLED.value)
                closed.append(run_id)
            except Exception as err:  # a run deleted by hand, a store that is away: nothing to close
                log.warning("could not close the earlier MLflow run %s: %s", run_id, err)
        return closed

    def finish(
        self,
        metrics: dict[str, float],
        artifacts: list[Path],
        status: RunStatus = RunStatus.FINISHED,
        tags: dict[str, str] | None = None,
    ) -> None:
        """Close the parent run with its metrics, ``tags`` (the sweep's answer, or why it ended early)
        and artifacts: FINISHED, FAILED when the driver raised, KILLED when the user stopped it."""
        if not self.parent_run_id:
            return
        try:
            if metrics or tags:
                self.client.log_batch(
                    self.parent_run_id,
                    metrics=[Metric(k, float(v), 0, 0) for k, v in metrics.items()],
                    tags=[RunTag(k, v) for k, v in (tags or {}).items()],
                )
            for path in artifacts:
                if path.exists():
                    self.client.log_artifact(self.parent_run_id, str(path))
            self.client.set_terminated(self.parent_run_id, status=status.value)
        except Exception as err:
            log.warning("could not close the MLflow parent run: %s", err)


def _run_status(status: TrialStatus) -> RunStatus:
    """A trial run's MLflow status: an interrupted launch is KILLED (the driver stopped it), not a
    failure of its configuration."""
    if status is TrialStatus.OK:
        return RunStatus.FINISHED
    return RunStatus.KILLED if status is TrialStatus.INTERRUPTED else RunStatus.FAILED


def _span_ms(result: TrialResult) -> tuple[int | None, int | None]:
    """The launch's start and end on its node, in MLflow's milliseconds (None, None: not launched)."""
    if result.started_unix > 0 and result.finished_unix >= result.started_unix:
        return int(result.started_unix * 1000), int(result.finished_unix * 1000)
    return None, None


def _run_name(record: TrialRecord) -> str:
    r = record.result
    return f"trial-{record.number} {r.status.value} {r.config.label()}"


def _note(record: TrialRecord) -> str:
    """The run's description (MLflow's mlflow.note.content tag): what happened, in words."""
    r = record.result
    where = f"on node `{r.node_id}`" if r.node_id else "(not launched)"
    if not r.node_id and r.status is TrialStatus.INTERRUPTED:
        # launched, but its driver died with the node's name (kill -9): its log says what ran
        where = "(launched; its driver stopped before its node answered)"
    lines = [f"**{r.status.value}** {where}: {r.config.label()}"]
    if r.failure is not None:
        lines.append(f"- failure: {r.failure.stage.value} / {r.failure.kind.value}: {r.failure.message}")
    if record.diagnosis:
        lines.append(f"- diagnosis: {record.diagnosis}")
    if r.predicted:
        figures = ", ".join(f"{k} {v:,.2f}" for k, v in r.predicted.items())
        lines.append(f"- the memory model's figures: {figures}")
    lines.extend(f"- {n}" for n in r.notes)
    return "\n".join(lines)
