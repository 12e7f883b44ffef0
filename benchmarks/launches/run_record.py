"""What one strategy's run leaves behind: its paid launches (each with the answer it gave after it)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from benchmarks.launches.noisy import Launch, Launcher
from orchestrator.records import ServerConfig


@dataclass
class SearchRun:
    strategy: str
    seed: int
    launches: list[Launch] = field(default_factory=list)
    skipped: int = 0  # proposals the memory model ruled out: no launch, no GPU time
    mispredicted: int = 0  # launches the (ready) memory model predicted to fit that then ran out of memory
    repeats_answered: int = 0  # proposals of an already measured configuration, answered without a launch
    confirm_launches: int = 0  # launches spent confirming the top candidates


Strategy = Callable[[Launcher, Sequence[ServerConfig]], SearchRun]


def done(name: str, launcher: Launcher) -> SearchRun:
    return SearchRun(name, launcher.seed, list(launcher.launches))
