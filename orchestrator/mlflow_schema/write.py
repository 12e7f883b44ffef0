"""A trial as MLflow holds it: its tags, params, metrics and artifacts (`tracking` writes them).

Params come from the configuration and the spec, never from the command line, so nothing the simulator
alone takes (its profile, its state folder) becomes a param.
"""

from __future__ import annotations

import json
from collections.abc import Sequence, Set
from dataclasses import asdict, dataclass

from orchestrator.config.codec import mlflow_params
from orchestrator.engines.launch import SIM_FLAG_PREFIX
from orchestrator.engines.shell import shell_script
from orchestrator.mlflow_schema.names import (
    FLAG_SET,
    NO_SPECULATION,
    PARAM_LIMIT,
    PREDICTED_PREFIX,
    RESOLVED_PREFIX,
    TEXT_LIMIT,
    Artifact,
    Metric,
    Param,
    Tag,
    per_dataset,
)
from orchestrator.records import TrialRecord, TrialResult
from orchestrator.secrets import MASK, SECRET_FLAGS, mask_argv
from orchestrator.spec.dataset_ref import DatasetCounts
from orchestrator.spec.fixed_flags import FixedFlags
from orchestrator.spec.sweep_spec import SweepSpec


def sweep_params(
    spec: SweepSpec, spec_path: str, trials: int, datasets: Sequence[DatasetCounts] = ()
) -> dict[str, str]:
    """The parent run's params: what `history` matches earlier sweeps of the same model by, and what each
    dataset gives a stage (`bench.traffic.workload_counts`)."""
    counts: dict[str, str] = {}
    for d in datasets:
        counts[f"{Param.DATASET_REQUESTS.value}.{d.key}"] = str(d.requests)
        if d.conversations is not None:
            counts[f"{Param.DATASET_CONVERSATIONS.value}.{d.key}"] = str(d.conversations)
            counts[f"{Param.DATASET_SKIPPED.value}.{d.key}"] = str(d.skipped_total)
    return counts | {
        Param.SPEC: spec_path,
        Param.BACKEND: spec.backend.value,
        Param.ENGINE: spec.engine,
        Param.GPUS_PER_NODE: str(spec.node.gpus),
        Param.MODEL_PATH: spec.model.path,
        Param.DRAFT_MODEL_PATH: spec.model.draft_path,
        Param.TRIALS: str(trials),
        Param.DATASET: spec.workload.dataset_label,
    }


def sweep_tags(study: str, resume: bool, datasets: Sequence[DatasetCounts] = ()) -> dict[str, str]:
    """The parent run's tags besides its kind (which `Tracker.start` sets); the datasets' counts in the
    console's words (for the report and MLflow's run page)."""
    tags = {Tag.STUDY.value: study, Tag.RESUME.value: str(resume).lower()}
    if datasets:
        tags[Tag.DATASET_COUNTS.value] = "\n".join(d.line for d in datasets)[:TEXT_LIMIT]
    return tags


@dataclass(frozen=True)
class LaunchParams:
    """The params every trial of a sweep shares, from its spec: its engine, and for a launched trial the
    engine's flags that are not searched (the model, the tensor-parallel size, the spec's fixed flags,
    secrets masked)."""

    backend: str = ""
    engine: str = ""
    model_path: str = ""
    draft_model_path: str = ""
    speculative_algorithm: str = ""
    tp_size: int = 0
    fixed: tuple[tuple[str, str], ...] = ()  # each fixed flag as a param, for MLflow's compare view
    fixed_flags: tuple[str, ...] = ()  # the fixed flags as given, what a command read back renders

    @classmethod
    def from_spec(cls, spec: SweepSpec) -> LaunchParams:
        flags = mask_argv(spec.server.flags, spec.server.secret_flags)
        fixed = _flag_params(spec.server.fixed, SECRET_FLAGS | set(spec.server.secret_flags))
        if spec.server.enable_metrics:
            fixed[Param.ENABLE_METRICS] = FLAG_SET
        return cls(
            spec.backend.value,
            spec.engine,
            spec.model.path,
            spec.model.draft_path,
            spec.model.speculative_algorithm,
            spec.node.gpus,
            tuple(fixed.items()),
            flags,
        )


def _flag_params(fixed: FixedFlags, secret: Set[str]) -> dict[str, str]:
    """`--trust-remote-code --page-size=16` -> {"trust_remote_code": "true", "page_size": "16"}, less
    the simulator's own flags (no SGLang setting) and with secrets masked: the spec's fixed flags, named
    for MLflow's compare view (a command read back from the run renders `Param.FIXED_FLAGS`, never these)."""
    params: dict[str, str] = {}
    for option in fixed.options:
        if option.name.startswith(SIM_FLAG_PREFIX):
            continue
        value = FLAG_SET if option.value is None else MASK if option.name in secret else option.value
        params[option.name[2:].replace("-", "_")] = value
    return params


def param_value(value: float | int | str) -> str:
    """A value as the launch command writes it (`0.71`, not `0.7100000000000001`)."""
    return f"{value:g}" if isinstance(value, float) else str(value)


def trial_params(result: TrialResult, launch: LaunchParams | None = None) -> dict[str, str]:
    """A trial's params: its configuration, and for a launched trial what the spec launched it with."""
    config = result.config
    params = mlflow_params(config)
    if launch is not None and launch.engine:
        params[Param.ENGINE] = launch.engine
    if launch is not None and result.command:  # a configuration never launched was given no flag
        params.update(dict(launch.fixed))
        params[Param.FIXED_FLAGS] = json.dumps(list(launch.fixed_flags))
        params[Param.MODEL_PATH] = launch.model_path
        params[Param.TP_SIZE] = str(launch.tp_size)
        params[Param.BACKEND] = launch.backend
        if config.speculative:
            params[Param.SPECULATIVE_ALGORITHM] = launch.speculative_algorithm
            params[Param.SPECULATIVE_DRAFT_MODEL_PATH] = launch.draft_model_path
    if not config.speculative:
        params[Param.SPECULATIVE_ALGORITHM] = NO_SPECULATION
    if result.dataset:
        params[Param.DATASET] = result.dataset
    return {k: v[:PARAM_LIMIT] for k, v in params.items()}


def trial_metrics(record: TrialRecord) -> dict[str, float]:
    """A trial's single-valued metrics (step 0)."""
    r = record.result
    metrics: dict[str, float] = {}
    best = r.best_stage
    if best is not None:
        metrics.update(
            {
                Metric.OUTPUT_TOK_PER_S: best.output_tok_per_s,
                Metric.TTFT_P50_MS: best.ttft_p50_ms,
                Metric.TTFT_P99_MS: best.ttft_p99_ms,
                Metric.ITL_P50_MS: best.itl_p50_ms,
                Metric.ITL_P99_MS: best.itl_p99_ms,
                Metric.TPOT_P50_MS: best.tpot_p50_ms,
                Metric.REQUEST_PER_S: best.request_per_s,
                Metric.BEST_CONCURRENCY: float(best.concurrency),
                Metric.STAGE_WINDOW_S: best.window_s,
            }
        )
        if best.output_tok_per_s_ci95 is not None:
            low, high = best.output_tok_per_s_ci95
            metrics[Metric.OUTPUT_TOK_PER_S_CI95_LOW], metrics[Metric.OUTPUT_TOK_PER_S_CI95_HIGH] = low, high
        accept = r.accept_length
        if accept is not None:
            metrics[Metric.ACCEPT_LENGTH] = accept
        for per in best.by_dataset:  # acceptance and tok/s of each dataset of the mix
            metrics[per_dataset(Metric.OUTPUT_TOK_PER_S, per.name)] = per.output_tok_per_s
            if per.accept_length is not None:
                metrics[per_dataset(Metric.ACCEPT_LENGTH, per.name)] = per.accept_length
    optional = {
        Metric.SERVER_ACCEPT_LENGTH: r.server_accept_length,
        Metric.OBJECTIVE: record.objective,
        Metric.SPEEDUP_VS_BASELINE: record.speedup_vs_baseline,
        Metric.STARTUP_S: r.startup_s,
        Metric.OOM_TO_CLEAN_S: r.oom_to_clean_s,
    }
    metrics.update({k: v for k, v in optional.items() if v is not None})
    metrics[Metric.TRIAL_WALL_S] = r.wall_s
    if r.config.speculative_adaptive:
        metrics[Metric.ADAPTIVE_SWITCHES] = float(r.adaptive_switches)
    metrics.update(r.memory.as_metrics())
    metrics.update({RESOLVED_PREFIX + k: float(v) for k, v in r.resolved_args.as_dict().items()})
    metrics.update({PREDICTED_PREFIX + k: v for k, v in r.predicted.items()})
    return metrics


def stage_series(result: TrialResult) -> list[tuple[str, float, int]]:
    """(metric, value, step) of each benchmark stage, in the order they ran."""
    out: list[tuple[str, float, int]] = []
    for step, stage in enumerate(result.stages):
        out.append((Metric.STAGE_OUTPUT_TOK_PER_S, stage.output_tok_per_s, step))
        out.append((Metric.STAGE_CONCURRENCY, float(stage.concurrency), step))
    return out


def trial_tags(record: TrialRecord, parent_run_id: str) -> dict[str, str]:
    r = record.result
    tags = {
        Tag.PARENT_RUN.value: parent_run_id,
        Tag.STATUS.value: r.status.value,
        Tag.TRIAL_NUMBER.value: str(record.number),
        Tag.NODE_ID.value: r.node_id,
        Tag.SERVER_VERSION.value: r.server_version,
        Tag.CONFIG.value: r.config.label(),
        Tag.BASELINE.value: str(record.baseline).lower(),
    }
    if r.failure is not None:
        tags[Tag.FAILURE_STAGE] = r.failure.stage.value
        tags[Tag.FAILURE_KIND] = r.failure.kind.value
        tags[Tag.FAILURE_MESSAGE] = r.failure.message[:TEXT_LIMIT]
    if record.diagnosis:
        tags[Tag.DIAGNOSIS] = record.diagnosis[:TEXT_LIMIT]
    tags.update(dict(record.extra_tags))
    return tags


def trial_artifacts(result: TrialResult) -> dict[Artifact, str]:
    """The run's files and their text. Only what is true for the trial: a configuration that was never
    launched (predicted OOM) has no log and no command; its predicted figures are metrics."""
    files: dict[Artifact, str] = {}
    if result.log_text:
        files[Artifact.SERVER_LOG] = result.log_text
    if result.command:
        files[Artifact.LAUNCH_COMMAND] = shell_script(result.command)
    if result.adaptive_config:
        files[Artifact.ADAPTIVE_CONFIG] = result.adaptive_config
    files[Artifact.RESULT] = result_json(result)
    return files


def result_json(result: TrialResult) -> str:
    """The result as JSON, less the log (the run's server.log)."""
    data = asdict(result)
    data.pop("log_text")
    # The figures that are known, as before the account was typed: readers take a missing one as unknown.
    data["memory"] = result.memory.as_metrics()
    data["resolved_args"] = result.resolved_args.as_dict()
    return json.dumps(data, indent=1, default=str)
