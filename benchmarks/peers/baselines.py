"""The two strategies that need no tool: the exhaustive grid (the reference) and uniform random search."""

from __future__ import annotations

import random
from collections.abc import Sequence

from benchmarks.launches.noisy import Launcher
from benchmarks.launches.run_record import SearchRun, done
from orchestrator.records import ServerConfig


def grid(launcher: Launcher, configs: Sequence[ServerConfig]) -> SearchRun:
    """All of it, in order: the budget does not apply (it is the reference)."""
    for config in configs:
        launcher.launch(config)
    return done("grid", launcher)


def random_search(launcher: Launcher, configs: Sequence[ServerConfig]) -> SearchRun:
    for config in random.Random(launcher.seed).sample(list(configs), len(configs)):
        if launcher.exhausted:
            break
        launcher.launch(config)
    return done("random", launcher)
