"""MLflow: one experiment per study, a parent run per invocation, a nested run per trial.

Only the driver writes here. Params carry SGLang's own flag names so MLflow's compare view and
parallel-coordinates plot work without set-up. If the tracking server is unreachable, the record is
spooled on disk and written when it answers again: nothing that ran is lost.
"""

from __future__ import annotations

import json
import logging
import pickle
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from mlflow.entities import Metric, Param, RunTag
from mlflow.tracking import MlflowClient

from orchestrator.records import TrialResult, TrialStatus
from orchestrator.server.command import shell_script

log = logging.getLogger(__name__)


# What the experiment is, for MLflow's UI: training-style runs (not GenAI traces), and the metric that
# matters. MLflow 3.17's UI picks its page from its GenAI / Model training switch, which a link sets with
# `?workflowType=machine_learning` (see `runs_url`); its charts always include the primary metric.
EXPERIMENT_TAGS = {
    "mlflow.experimentKind": "custom_model_development",
    "mlflow.experiment.primaryMetric.name": "output_tok_per_s",
}


def runs_url(ui_base: str, experiment_id: str) -> str:
    """The experiment's training-runs page in the MLflow UI (not its GenAI overview of traces)."""
    return f"{ui_base.rstrip('/')}/#/experiments/{experiment_id}?workflowType=machine_learning"


@dataclass(frozen=True)
class TrialRecord:
    """What the driver logs for one trial: the result plus what only the driver knows."""

    number: int
    result: TrialResult
    objective: float | None
    speedup_vs_baseline: float | None = None
    diagnosis: str = ""
    baseline: bool = False
    extra_tags: tuple[tuple[str, str], ...] = ()


def flag_params(argv: tuple[str, ...]) -> dict[str, str]:
    """`--mem-fraction-static 0.85` -> {"mem_fraction_static": "0.85"}; a bare flag -> "true"."""
    params: dict[str, str] = {}
    args = list(argv)
    i = 0
    while i < len(args):
        arg = args[i]
        if arg.startswith("--"):
            name, eq, value = arg[2:].partition("=")
            key = name.replace("-", "_")
            if eq:
                params[key] = value
            elif i + 1 < len(args) and not args[i + 1].startswith("--"):
                params[key] = args[i + 1]
                i += 1
            else:
                params[key] = "true"
        i += 1
    # Scratch paths and the port differ per trial and say nothing about the configuration; they
    # would only crowd MLflow's parallel-coordinates plot. The graph flag duplicates cuda_graph_max_bs.
    for noise in ("sim_state_dir", "sim_profile", "port", "host", "cuda_graph_max_bs_decode"):
        params.pop(noise, None)
    return params


def trial_metrics(record: TrialRecord) -> dict[str, float]:
    r = record.result
    metrics: dict[str, float] = {}
    best = r.best_stage
    if best is not None:
        metrics.update(
            output_tok_per_s=best.output_tok_per_s,
            ttft_p50_ms=best.ttft_p50_ms,
            ttft_p99_ms=best.ttft_p99_ms,
            itl_p50_ms=best.itl_p50_ms,
            itl_p99_ms=best.itl_p99_ms,
            tpot_p50_ms=best.tpot_p50_ms,
            request_per_s=best.request_per_s,
            best_concurrency=float(best.concurrency),
            stage_window_s=best.window_s,
        )
        if best.output_tok_per_s_ci95 is not None:
            metrics["output_tok_per_s_ci95_low"], metrics["output_tok_per_s_ci95_high"] = (
                best.output_tok_per_s_ci95
            )
        accept = r.accept_length
        if accept is not None:
            metrics["accept_length"] = accept
        for per in best.by_dataset:  # acceptance and tok/s of each dataset of the mix
            metrics[f"output_tok_per_s.{per.name}"] = per.output_tok_per_s
            if per.accept_length is not None:
                metrics[f"accept_length.{per.name}"] = per.accept_length
    if r.server_accept_length is not None:
        metrics["server_accept_length"] = r.server_accept_length
    if record.objective is not None:
        metrics["objective"] = record.objective
    if record.speedup_vs_baseline is not None:
        metrics["speedup_vs_baseline"] = record.speedup_vs_baseline
    if r.startup_s is not None:
        metrics["startup_s"] = r.startup_s
    if r.oom_to_clean_s is not None:
        metrics["oom_to_clean_s"] = r.oom_to_clean_s
    metrics["trial_wall_s"] = r.wall_s
    for key, amount in r.memory.items():
        metrics[key] = float(amount)
    for key, value in r.resolved_args.items():
        if isinstance(value, int | float) and not isinstance(value, bool):
            metrics[f"resolved_{key}"] = float(value)
    return metrics


class Tracker:
    def __init__(
        self, tracking_uri: str, experiment: str, spool_dir: Path, artifact_root: Path | None = None
    ) -> None:
        self.client = MlflowClient(tracking_uri=tracking_uri)
        self.tracking_uri = tracking_uri
        self.experiment_name = experiment
        self.spool_dir = spool_dir
        self.spool_dir.mkdir(parents=True, exist_ok=True)
        self.experiment_id = ""
        self.parent_run_id = ""
        self._run_ids: dict[int, str] = {}
        # With a local store MLflow would put artifacts in ./mlruns of whatever folder the driver ran
        # in; they belong next to the database. A tracking server chooses for itself.
        self.artifact_root = artifact_root

    def start(self, run_name: str, params: dict[str, str], tags: dict[str, str]) -> str:
        existing = self.client.get_experiment_by_name(self.experiment_name)
        self.experiment_id = (
            existing.experiment_id
            if existing
            else self.client.create_experiment(
                self.experiment_name,
                artifact_location=self.artifact_root.resolve().as_uri() if self.artifact_root else None,
                tags=EXPERIMENT_TAGS,
            )
        )
        for key, value in EXPERIMENT_TAGS.items():
            if existing is not None and existing.tags.get(key) != value:  # made before these tags existed
                self.client.set_experiment_tag(self.experiment_id, key, value)
        run = self.client.create_run(self.experiment_id, run_name=run_name, tags={"kind": "sweep", **tags})
        self.parent_run_id = run.info.run_id
        self.client.log_batch(self.parent_run_id, params=[Param(k, str(v)[:6000]) for k, v in params.items()])
        return self.parent_run_id

    def run_id_of(self, number: int) -> str | None:
        """The MLflow run of a trial written by this tracker (None while it is spooled)."""
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
        tags = {
            "mlflow.parentRunId": self.parent_run_id,
            "status": r.status.value,
            "optuna_trial_number": str(record.number),
            "node_id": r.node_id,
            "server_version": r.server_version,
            "config": r.config.label(),
            "baseline": str(record.baseline).lower(),
        }
        if r.failure is not None:
            tags.update(
                failure_stage=r.failure.stage.value,
                failure_kind=r.failure.kind.value,
                failure_message=r.failure.message[:4000],
            )
        if record.diagnosis:
            tags["diagnosis"] = record.diagnosis[:4000]
        tags.update(dict(record.extra_tags))
        name = f"trial-{record.number} {r.status.value} {r.config.label()}"
        run = self.client.create_run(self.experiment_id, run_name=name, tags=tags)
        run_id = run.info.run_id
        self._run_ids[record.number] = run_id
        params = {**{k: str(v) for k, v in r.config.as_params().items()}, **flag_params(r.command)}
        if not r.config.speculative:
            params["speculative_algorithm"] = "none"
        if r.dataset:
            params["dataset"] = r.dataset
        params.pop("speculative_adaptive_config", None)  # a per-trial path; the file is an artifact
        params["speculative_adaptive"] = r.config.speculative_adaptive or "off"
        metrics = [Metric(k, float(v), 0, 0) for k, v in trial_metrics(record).items()]
        metrics += [Metric(f"predicted_{k}", v, 0, 0) for k, v in r.predicted.items()]
        for step, stage in enumerate(r.stages):
            metrics.append(Metric("stage_output_tok_per_s", stage.output_tok_per_s, 0, step))
            metrics.append(Metric("stage_concurrency", float(stage.concurrency), 0, step))
        self.client.log_batch(
            run_id,
            metrics=metrics,
            params=[Param(k, v[:6000]) for k, v in params.items()],
            tags=[RunTag("mlflow.note.content", _note(record))],
        )
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            # Only what is true for the trial: a configuration that was never launched (predicted OOM)
            # has no log and no command; its predicted figures are metrics and its reason the note.
            if r.log_text:
                (folder / "server.log").write_text(r.log_text)
            if r.command:
                (folder / "launch_command.sh").write_text(shell_script(r.command))
            if r.adaptive_config:
                (folder / "speculative_adaptive.json").write_text(r.adaptive_config)
            (folder / "result.json").write_text(json.dumps(_jsonable(asdict(r)), indent=1, default=str))
            self.client.log_artifacts(run_id, str(folder))
        status = "FINISHED" if r.status is TrialStatus.OK else "FAILED"
        self.client.set_terminated(run_id, status=status)
        return run_id

    def finish(self, metrics: dict[str, float], artifacts: list[Path], failed: bool = False) -> None:
        if not self.parent_run_id:
            return
        try:
            if metrics:
                self.client.log_batch(
                    self.parent_run_id, metrics=[Metric(k, float(v), 0, 0) for k, v in metrics.items()]
                )
            for path in artifacts:
                if path.exists():
                    self.client.log_artifact(self.parent_run_id, str(path))
            self.client.set_terminated(self.parent_run_id, status="FAILED" if failed else "FINISHED")
        except Exception as err:
            log.warning("could not close the MLflow parent run: %s", err)


def _note(record: TrialRecord) -> str:
    r = record.result
    where = f"on node `{r.node_id}`" if r.node_id else "(not launched)"
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


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items() if k != "log_text"}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value
