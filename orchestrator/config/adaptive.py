"""SGLang's runtime speculation policy (``--speculative-adaptive``, 0.5.17 on) as a searchable choice.

SGLang then switches ``speculative_num_steps`` at run time between pre-built tiers, per running-batch
bucket (config keys "1", "8", "32", "64": a batch goes to the largest key not above it), following a
moving average of the accepted drafts. A sweep can leave it off, turn it on with SGLang's own tiers, or
turn it on with tiers built from the trial's searched steps (written to a JSON file per trial and
passed with ``--speculative-adaptive-config``). Only top-k 1 is supported, and the launch must be at
the largest tier: a smaller launch sizes the shared logits buffer too small for the larger tiers and
the start fails (seen on the H200). Every extra tier captures another set of CUDA graphs.
"""

from __future__ import annotations

import json
import math
from enum import StrEnum
from pathlib import Path
from typing import Any

from orchestrator.records import ServerConfig

FIRST_VERSION = (0, 5, 17)
CONFIG_FILE = "speculative_adaptive.json"

# 0.5.17's DEFAULT_ADAPTIVE_CONFIG (sglang/srt/speculative/adaptive_spec_params.py).
SGLANG_DEFAULT: dict[str, dict[str, Any]] = {
    "1": {"candidate_steps": [1, 3, 7], "up_hysteresis": 0.0, "down_hysteresis": -0.25},
    "8": {"candidate_steps": [0, 1, 3], "up_hysteresis": 0.0, "down_hysteresis": 0.0},
    "32": {"candidate_steps": [0, 1], "up_hysteresis": 0.0, "down_hysteresis": 0.0},
    "64": {"candidate_steps": [0], "up_hysteresis": 0.0, "down_hysteresis": 0.0},
}


class AdaptiveMode(StrEnum):
    OFF = "off"
    DEFAULT = "default"  # SGLang's built-in tiers, no config file
    TIERS = "tiers"  # tiers built from the trial's steps, in a config file


def supported(version: tuple[int, ...]) -> bool:
    return version >= FIRST_VERSION


def unsupported(config: ServerConfig, version: str, parsed: tuple[int, ...]) -> str:
    """Why this configuration cannot launch on this SGLang (``version``, ``parsed``); '' when it can."""
    if not config.speculative_adaptive or supported(parsed):
        return ""
    return (
        f"SGLang {version} has no --speculative-adaptive (0.5.17 and later); "
        "remove 'default' and 'tiers' from search.speculative_adaptive"
    )


def proposed_config(steps: int) -> dict[str, dict[str, Any]]:
    """Tiers shaped like SGLang's defaults but topped at ``steps``: a light batch may speculate up to
    ``steps``, heavier buckets fewer, the heaviest not at all (the best steps fall as the batch grows)."""
    half = max(1, math.ceil(steps / 2))
    tiers = {
        "1": sorted({1, half, steps}),
        "8": sorted({0, 1, half}),
        "32": [0, 1],
        "64": [0],
    }
    return {
        key: {
            "candidate_steps": steps_list,
            "up_hysteresis": 0.0,
            "down_hysteresis": -0.25 if key == "1" else 0.0,
        }
        for key, steps_list in tiers.items()
    }


def config_for(mode: AdaptiveMode, steps: int) -> dict[str, dict[str, Any]] | None:
    """The per-bucket tiers a trial runs with; None when adaptive speculation is off."""
    if mode is AdaptiveMode.OFF:
        return None
    return SGLANG_DEFAULT if mode is AdaptiveMode.DEFAULT else proposed_config(steps)


def candidate_steps(config: dict[str, dict[str, Any]]) -> list[int]:
    """Every tier of every bucket: each one is a set of CUDA graphs built at start-up."""
    return sorted({int(s) for entry in config.values() for s in entry["candidate_steps"]})


def launch_steps(mode: AdaptiveMode, steps: int) -> int:
    """The ``--speculative-num-steps`` to launch with: the largest tier."""
    config = config_for(mode, steps)
    return max(candidate_steps(config)) if config else steps


def bucket_key(config: dict[str, dict[str, Any]], batch: int) -> str:
    """The bucket a running batch uses: the largest key not above it (the smallest for tiny batches)."""
    keys = sorted(int(k) for k in config if k.isdigit())
    below = [k for k in keys if k <= batch]
    return str(below[-1] if below else keys[0])


def tiers_of(config: ServerConfig) -> dict[str, dict[str, Any]] | None:
    """The tiers a configuration runs with (its steps are already the launch's, the largest tier)."""
    if not config.speculative_adaptive or config.speculative_num_steps is None:
        return None
    return config_for(AdaptiveMode(config.speculative_adaptive), config.speculative_num_steps)


def saved_config(folder: Path) -> str:
    """The config file a trial launched with ('' for none), kept with its record."""
    path = folder / CONFIG_FILE
    return path.read_text() if path.is_file() else ""


def write_config(config: ServerConfig, folder: Path) -> str:
    """Write the trial's ``--speculative-adaptive-config`` file (tiers mode) and return its path."""
    path = folder / CONFIG_FILE
    tiers = tiers_of(config)
    if tiers is not None and config.speculative_adaptive == AdaptiveMode.TIERS:
        path.write_text(json.dumps(tiers, indent=1) + "\n")
    return str(path)
