"""Every tag, param, metric and artifact name of a sweep's MLflow runs.

The names never change: MLflow data written by earlier sweeps must read back.
"""

from __future__ import annotations

from dataclasses import fields
from enum import StrEnum

from orchestrator.config import adaptive
from orchestrator.config.fields import SearchedField
from orchestrator.records import MemoryAccount


class Tag(StrEnum):
    """Run tags: the parent run's (KIND, STUDY, RESUME) and each trial run's."""

    KIND = "kind"  # SWEEP_KIND on the parent run of one invocation
    STUDY = "study"
    RESUME = "resume"  # "true" when the invocation resumed the study
    DATASET_COUNTS = "dataset_counts"  # the parent run's: the console's `dataset ...` lines, one a line
    CLOSED_REASON = "closed_reason"  # why a run ended KILLED: Ctrl-C, SIGTERM, or its driver died
    PARENT_RUN = "mlflow.parentRunId"
    NOTE = "mlflow.note.content"  # the run's description in MLflow's UI
    STATUS = "status"  # a TrialStatus value
    TRIAL_NUMBER = "optuna_trial_number"
    NODE_ID = "node_id"
    SERVER_VERSION = "server_version"  # the SGLang version: how its flags are spelled
    CONFIG = "config"  # ServerConfig.label()
    BASELINE = "baseline"  # "true" for the no-speculation reference
    FAILURE_STAGE = "failure_stage"
    FAILURE_KIND = "failure_kind"
    FAILURE_MESSAGE = "failure_message"
    DIAGNOSIS = "diagnosis"
    PRUNED_AT_STAGE = "pruned_at_stage"  # stopped early by the pruner, after this stage
    MEMORY_MODEL_CORRECTION = "memory_model_correction"
    CONFIRM_OF = "confirm_of"  # a confirmation launch of the configuration first measured by that trial
    LOSSLESS = "lossless"  # a Lossless value, when the lossless check judged the trial
    LOSSLESS_DETAIL = "lossless_detail"
    # The parent run's answer (driver.answer.choose): its configuration's label, its launches, the verdict.
    ANSWER_CONFIG = "answer_config"
    ANSWER_LAUNCHES = "answer_launches"  # trial numbers, comma-separated
    ANSWER_VERDICT = "answer_verdict"
    # "on" (a speculative configuration), "off" (the server without speculation) or "by level" (it pays
    # at some concurrency levels and loses at others: best.json's `split` says where)
    ANSWER_SPECULATION = "answer_speculation"


class Lossless(StrEnum):
    OK = "ok"
    MISMATCH = "mismatch"  # lossy: never recommended
    # every difference at a position where the baseline's top two were within bf16 rounding and the
    # trial took the second: numerics of the verify pass, not a lossy draft (still recommendable)
    NEAR_TIE = "near_tie"


SWEEP_KIND = "sweep"


class Param(StrEnum):
    """Params: the parent run's (the spec in short), then a trial run's besides the configuration's."""

    SPEC = "spec"
    BACKEND = "backend"
    # The engine the sweep launched (`spec.engine`), on the parent run and every trial run; a run
    # written before it was recorded has none and is SGLang's (`read.run_engine`).
    ENGINE = "engine"
    GPUS_PER_NODE = "gpus_per_node"
    MODEL_PATH = "model_path"
    DRAFT_MODEL_PATH = "draft_model_path"
    TRIALS = "trials"
    DATASET = "dataset"  # the workload's datasets and weights; the parent's and each trial's
    # The parent run's, per dataset (`dataset_requests.<name>`): what each stage sends from it, and for
    # conversations those kept and those left out (the reasons are in the DATASET_COUNTS tag).
    DATASET_REQUESTS = "dataset_requests"
    DATASET_CONVERSATIONS = "dataset_conversations"
    DATASET_SKIPPED = "dataset_skipped"
    TP_SIZE = "tp_size"
    SPECULATIVE_ALGORITHM = "speculative_algorithm"  # NO_SPECULATION for the baseline
    SPECULATIVE_DRAFT_MODEL_PATH = "speculative_draft_model_path"
    SPECULATIVE_ADAPTIVE = SearchedField.SPECULATIVE_ADAPTIVE.value  # an AdaptiveMode value ("off": fixed)
    ENABLE_METRICS = "enable_metrics"
    # The spec's fixed flags as launched (secrets masked), a JSON list: what a command read back from the
    # run is rendered with. A run written before it has each fixed flag as a param of its own only.
    FIXED_FLAGS = "fixed_flags"
    # The configuration's own values, under ServerConfig's field names (SGLang's flags), written and
    # read by config.codec.
    MEM_FRACTION_STATIC = SearchedField.MEM_FRACTION_STATIC.value
    CUDA_GRAPH_MAX_BS = SearchedField.CUDA_GRAPH_MAX_BS.value
    MAX_RUNNING_REQUESTS = SearchedField.MAX_RUNNING_REQUESTS.value
    SPECULATIVE_NUM_STEPS = SearchedField.SPECULATIVE_NUM_STEPS.value
    SPECULATIVE_EAGLE_TOPK = SearchedField.SPECULATIVE_EAGLE_TOPK.value
    SPECULATIVE_NUM_DRAFT_TOKENS = SearchedField.SPECULATIVE_NUM_DRAFT_TOKENS.value


NO_SPECULATION = "none"
FLAG_SET = "true"  # a bare flag's param value


class Metric(StrEnum):
    """A trial run's metrics, besides the memory account (MemoryAccount's field names) and the prefixed
    families below. Figures of the best stage unless said otherwise."""

    OUTPUT_TOK_PER_S = "output_tok_per_s"
    OUTPUT_TOK_PER_S_CI95_LOW = "output_tok_per_s_ci95_low"
    OUTPUT_TOK_PER_S_CI95_HIGH = "output_tok_per_s_ci95_high"
    TTFT_P50_MS = "ttft_p50_ms"
    TTFT_P99_MS = "ttft_p99_ms"
    ITL_P50_MS = "itl_p50_ms"
    ITL_P99_MS = "itl_p99_ms"
    TPOT_P50_MS = "tpot_p50_ms"
    REQUEST_PER_S = "request_per_s"
    BEST_CONCURRENCY = "best_concurrency"
    STAGE_WINDOW_S = "stage_window_s"
    ACCEPT_LENGTH = "accept_length"  # TrialResult.accept_length
    SERVER_ACCEPT_LENGTH = "server_accept_length"
    OBJECTIVE = "objective"
    SPEEDUP_VS_BASELINE = "speedup_vs_baseline"
    STARTUP_S = "startup_s"
    OOM_TO_CLEAN_S = "oom_to_clean_s"
    TRIAL_WALL_S = "trial_wall_s"
    ADAPTIVE_SWITCHES = "adaptive_switches"  # run-time tier changes of adaptive speculation
    KV_CACHE_TOKENS = "kv_cache_tokens"  # a figure of the memory account, read on its own by the tables
    # One value per stage, at step = the stage's index.
    STAGE_OUTPUT_TOK_PER_S = "stage_output_tok_per_s"
    STAGE_CONCURRENCY = "stage_concurrency"


RESOLVED_PREFIX = "resolved_"  # + a resolved argument's name: the value SGLang settled on
PREDICTED_PREFIX = "predicted_"  # + a figure of the memory model, for a configuration never launched
MEMORY_FIGURES = tuple(f.name for f in fields(MemoryAccount))  # the memory account, in the log's order
MEMORY_SUFFIXES = ("_gb", "_gib", "_mib", "_bytes")


def per_dataset(metric: Metric, dataset: str) -> str:
    """The metric of one dataset of the workload's mix."""
    return f"{metric.value}.{dataset}"


class Artifact(StrEnum):
    SERVER_LOG = "server.log"
    LAUNCH_COMMAND = "launch_command.sh"
    ADAPTIVE_CONFIG = adaptive.CONFIG_FILE
    RESULT = "result.json"


# What the experiment is, for MLflow's UI: training-style runs (not GenAI traces), and the metric that
# matters. MLflow 3.17's UI picks its page from its GenAI / Model training switch, which a link sets with
# `?workflowType=machine_learning` (see `tracking.runs_url`); its charts always include the primary metric.
EXPERIMENT_TAGS = {
    "mlflow.experimentKind": "custom_model_development",
    "mlflow.experiment.primaryMetric.name": Metric.OUTPUT_TOK_PER_S.value,
}
TEXT_LIMIT = 4000  # a tag's text is cut here (MLflow's limit is 5000)
PARAM_LIMIT = 6000
