"""A trial run read back from MLflow (by `report.data` and `history`), under the names it was written with.

Its configuration reads back through `config_codec.config_from_mlflow`."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from orchestrator.config import adaptive
from orchestrator.engines import engine_for
from orchestrator.engines.shell import shell_command
from orchestrator.mlflow_schema.names import (
    FLAG_SET,
    MEMORY_FIGURES,
    MEMORY_SUFFIXES,
    NO_SPECULATION,
    NOT_FLAGS,
    RESOLVED_PREFIX,
    SWEEP_KIND,
    Param,
    Tag,
)
from orchestrator.spec.engine_catalog import EngineName


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


def command_from_params(params: Mapping[str, float | str], version: str, engine_name: str = "") -> str:
    """A launch command rebuilt from a trial's params, when its launch_command.sh is out of reach, with
    the flags of the run's own engine unless ``engine_name`` is given."""
    engine = engine_for(engine_name or run_engine(params))
    argv = ["python", "-m", engine.launch_module]
    for key, value in params.items():
        if key in NOT_FLAGS or (key == Param.SPECULATIVE_ALGORITHM and value == NO_SPECULATION):
            continue
        if key == Param.SPECULATIVE_ADAPTIVE:
            if value != adaptive.AdaptiveMode.OFF.value:
                argv.append(engine.flag_name(key, version))  # its tiers file is the run's artifact
            continue
        flag = engine.flag_name(key, version)
        argv.extend([flag] if value == FLAG_SET else [flag, str(value)])
    return shell_command(argv)
