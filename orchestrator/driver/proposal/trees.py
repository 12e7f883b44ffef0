"""The speculative trees a search space holds, and the values of each searched dimension.

A tree is (steps, top-k, draft tokens) after SGLang's rules (`space.suggest_config`): with top-k 1 the
draft tokens are steps + 1, with top-k > 1 they are clipped into [steps + 1, top-k x steps + 1]. The trees
are enumerated through `suggest_config` itself, so the policy proposes exactly what the study can hold.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import optuna

from orchestrator.driver.space import suggest_config
from orchestrator.records import ServerConfig
from orchestrator.spec_search import Choices, FloatRange, IntRange, SearchSpace

# A continuous fraction range is searched by the policy on this grid (SGLang reads two decimals well).
FRACTION_GRID = 0.01


@dataclass(frozen=True, order=True)
class Tree:
    """One speculative setting: what decides the speed once the memory flags cannot throttle it."""

    steps: int
    topk: int
    draft_tokens: int

    @property
    def max_accepted(self) -> int:
        """Draft tokens one verify can accept: the chain depth, bounded by the tree's size."""
        return max(0, min(self.steps, self.draft_tokens - 1))

    @classmethod
    def of(cls, config: ServerConfig) -> Tree | None:
        s, k, d = (
            config.speculative_num_steps,
            config.speculative_eagle_topk,
            config.speculative_num_draft_tokens,
        )
        if s is None or k is None or d is None:
            return None
        return cls(s, k, d)

    def label(self) -> str:
        return f"s{self.steps}k{self.topk}d{self.draft_tokens}"


def dim_values(dim: FloatRange | IntRange | Choices, *, integer: bool) -> list[float]:
    """Every value of a dimension, ascending (a continuous float range on `FRACTION_GRID`)."""
    if isinstance(dim, Choices):
        return sorted({int(c) if integer else float(c) for c in dim.choices})
    if isinstance(dim, IntRange):
        return [float(v) for v in range(dim.low, dim.high + 1, dim.step)]
    step = dim.step or FRACTION_GRID
    count = math.floor((dim.high - dim.low) / step + 1e-9) + 1
    return [round(dim.low + k * step, 10) for k in range(count)]


class _PathTrial:
    """Answers each suggestion with the option a path picks, so walking every path lists every tree."""

    def __init__(self, path: Sequence[int]) -> None:
        self.path = path
        self.sizes: list[int] = []
        self.user_attrs: dict[str, Any] = {}

    def _pick(self, options: Sequence[Any]) -> Any:
        depth = len(self.sizes)
        self.sizes.append(len(options))
        return options[self.path[depth] if depth < len(self.path) else 0]

    def suggest_float(
        self, name: str, low: float, high: float, *, step: float | None = None, log: bool = False
    ) -> float:
        return low  # the memory values are the structure's choice, not enumerated here

    def suggest_int(self, name: str, low: int, high: int, *, step: int = 1, log: bool = False) -> int:
        if name in ("cuda_graph_max_bs", "max_running_requests"):
            return low
        return int(self._pick(list(range(low, high + 1, step))))

    def suggest_categorical(self, name: str, choices: Sequence[Any]) -> Any:
        if name == "speculative_adaptive":
            return "off" if "off" in choices else choices[0]
        if name in ("mem_fraction_static", "cuda_graph_max_bs", "max_running_requests"):
            return choices[0]
        return self._pick(list(choices))


def trees_of(space: SearchSpace) -> list[Tree]:
    """Every distinct tree `suggest_config` can return for `space` (adaptive speculation left off)."""
    seen: dict[Tree, None] = {}

    def explore(prefix: list[int]) -> None:
        trial = _PathTrial(prefix)
        tree = Tree.of(suggest_config(cast(optuna.Trial, trial), space))
        if len(prefix) >= len(trial.sizes):
            if tree is not None:
                seen.setdefault(tree, None)
            return
        for k in range(trial.sizes[len(prefix)]):
            explore([*prefix, k])

    explore([])
    return sorted(seen)
