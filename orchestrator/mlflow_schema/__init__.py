"""The MLflow schema of a sweep: every tag, param, metric and artifact name, and both directions.

`tracking` writes a trial through `trial_tags`, `trial_params`, `trial_metrics`, `stage_series` and
`trial_artifacts` (`write`); `report.data` and `history` read runs back through the same names
(`memory_from_metrics`, `command_from_params`, ...: `read`). A configuration's own params are written
and read back by `config.codec` (`mlflow_params`, `config_from_mlflow`). A name lives in
`names` only, so a writer and its readers cannot drift apart. Params carry SGLang's own flag names so
MLflow's compare view and parallel-coordinates plot work without set-up.
"""

from orchestrator.mlflow_schema.names import (
    EXPERIMENT_TAGS,
    MEMORY_FIGURES,
    NO_SPECULATION,
    PARAM_LIMIT,
    PREDICTED_PREFIX,
    RESOLVED_PREFIX,
    SWEEP_KIND,
    TEXT_LIMIT,
    Artifact,
    Lossless,
    Metric,
    Param,
    Tag,
    per_dataset,
)
from orchestrator.mlflow_schema.read import (
    command_from_params,
    is_sweep,
    memory_from_metrics,
    memory_from_result,
    numbers,
    parse_param,
    run_engine,
)
from orchestrator.mlflow_schema.write import (
    LaunchParams,
    param_value,
    result_json,
    stage_series,
    sweep_params,
    sweep_tags,
    trial_artifacts,
    trial_metrics,
    trial_params,
    trial_tags,
)

__all__ = [
    "EXPERIMENT_TAGS",
    "MEMORY_FIGURES",
    "NO_SPECULATION",
    "PARAM_LIMIT",
    "PREDICTED_PREFIX",
    "RESOLVED_PREFIX",
    "SWEEP_KIND",
    "TEXT_LIMIT",
    "Artifact",
    "LaunchParams",
    "Lossless",
    "Metric",
    "Param",
    "Tag",
    "command_from_params",
    "is_sweep",
    "memory_from_metrics",
    "memory_from_result",
    "numbers",
    "param_value",
    "parse_param",
    "per_dataset",
    "result_json",
    "run_engine",
    "stage_series",
    "sweep_params",
    "sweep_tags",
    "trial_artifacts",
    "trial_metrics",
    "trial_params",
    "trial_tags",
]
