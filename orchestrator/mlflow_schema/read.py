"""A trial run read back from MLflow (by `report.data` and `history`), under the names it was written with.

Its configuration reads back through `config_codec.config_from_mlflow`, and a command from its params is
rendered from that configuration and the run's launch settings by the launch's own renderer
(`engines.launch.command_argv`): no command line is read back."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from orchestrator.config.codec import config_from_mlflow, engine_value_name
from orchestrator.config.fields import SearchedField
from orchestrator.engines.engine import LaunchSettings, TrialLaunch
from orchestrator.engines.launch import command_argv
from orchestrator.engines.shell import shell_command
from orchestrator.mlflow_schema.names import (
    FLAG_SET,
    MEMORY_FIGURES,
    MEMORY_SUFFIXES,
    RESOLVED_PREFIX,
    SWEEP_KIND,
    Artifact,
    Param,
    Tag,
)
from orchestrator.spec.engine_catalog import EngineName

DEFAULT_PORT = 30000  # SGLang's own, and best_command.sh's: a run records no port


def is_sweep(tags: Mapping[str, str]) -> bool:
    """A parent run (one invocation of the sweep), not a trial."""
    return tags.get(Tag.KIND) == SWEEP_KIND


def parse_param(text: str) -> float | str:
    """A param's text as a number where it is one."""
    for kind in (int, float):
        try:
            value = kind(text)
        except ValueError:
            continue
        return value if math.isfinite(value) else text
    return text


def memory_from_metrics(metrics: Mapping[str, float]) -> dict[str, float]:
    """The memory account when no result.json is at hand: the log's figures, in the log's order."""
    known = {k: metrics[k] for k in MEMORY_FIGURES if k in metrics}
    other = {
        k: v
        for k, v in sorted(metrics.items())
        if k.endswith(MEMORY_SUFFIXES) and k not in known and not k.startswith(RESOLVED_PREFIX)
    }
    return {**known, **other}


def memory_from_result(text: str) -> dict[str, float]:
    """The memory account of a run's result.json."""
    memory = json.loads(text).get("memory")
    return numbers(memory)


def numbers(values: Any) -> dict[str, float]:
    """The numeric entries of a JSON object (none when it is not one)."""
    items = values.items() if isinstance(values, dict) else ()
    return {str(k): float(v) for k, v in items if isinstance(v, int | float) and not isinstance(v, bool)}


def run_engine(params: Mapping[str, float | str]) -> str:
    """The engine a run's params name; SGLang for a run written before the engine was recorded."""
    return str(params.get(Param.ENGINE) or EngineName.SGLANG.value)


def launch_settings(params: Mapping[str, float | str], engine_name: str = "") -> LaunchSettings:
    """What a launched trial's run says it was launched with, besides its configuration, as the launch
    took it (`engines.engine.LaunchSettings`); its engine the run's own unless ``engine_name`` is given.
    The interpreter is `python`: the node's own is no param."""
    engine = engine_name or run_engine(params)
    return LaunchSettings(
        engine=engine,
        model_path=str(params.get(Param.MODEL_PATH, "")),
        draft_path=str(params.get(Param.SPECULATIVE_DRAFT_MODEL_PATH, "")),
        speculative_algorithm=str(params.get(Param.SPECULATIVE_ALGORITHM, "")),
        fixed_flags=_fixed_flags(params),
        enable_metrics=params.get(Param.ENABLE_METRICS) == FLAG_SET,
        python="python",
    )


def _fixed_flags(params: Mapping[str, float | str]) -> tuple[str, ...]:
    """The spec's fixed flags as the run recorded them; for a run written before `Param.FIXED_FLAGS` (or
    one whose list MLflow cut), its fixed-flag params as SGLang takes them, which is how such a run's
    command was read back then (`--name value`, a bare `--name` for a set flag)."""
    try:
        flags = json.loads(str(params[Param.FIXED_FLAGS]))
        if isinstance(flags, list) and all(isinstance(f, str) for f in flags):
            return tuple(flags)
    except (KeyError, ValueError):
        pass
    named = {p.value for p in Param} | {f.value for f in SearchedField}
    out: list[str] = []
    for key, value in params.items():
        if key not in named and engine_value_name(key) is None:  # an engine's own value: the configuration's
            flag = "--" + key.replace("_", "-")
            out += [flag] if value == FLAG_SET else [flag, str(value)]
    return tuple(out)


def command_from_params(params: Mapping[str, float | str], version: str, engine_name: str = "") -> str:
    """A launched trial's command from its run's params, when its launch_command.sh is out of reach:
    its configuration and launch settings rendered as the launch was (`engines.launch.command_argv`,
    the port SGLang's default); '' when the params make no configuration."""
    config = config_from_mlflow({k: str(v) for k, v in params.items()})
    if config is None:
        return ""
    launch = TrialLaunch(
        launch_settings(params, engine_name),
        config,
        version=version,
        port=DEFAULT_PORT,
        tp_size=int(params.get(Param.TP_SIZE) or 1),
        adaptive_config_path=Artifact.ADAPTIVE_CONFIG.value,  # the run's artifact, by its file name
    )
    argv = command_argv(launch)
    return shell_command(argv)
