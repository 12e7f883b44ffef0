"""The search space as Optuna sees it: suggesting a configuration, applying SGLang's rules.

The three speculative values are suggested together. With top-k 1 SGLang forces draft tokens to
steps + 1, so that value is derived, not searched; with top-k > 1 it is searched inside the draft
tree's size, [steps + 1, top-k * steps + 1].
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any, cast

from optuna.trial import BaseTrial

from orchestrator.config.adaptive import AdaptiveMode
from orchestrator.config.draft_tree import draft_token_bounds
from orchestrator.config.fields import SearchedField as F
from orchestrator.driver.search.grid import stepped
from orchestrator.driver.store.trial_attrs import TrialAttr
from orchestrator.records import ServerConfig
from orchestrator.spec.search import Choices, FloatRange, IntRange, SearchSpace, make_config


def _suggest_int(
    trial: BaseTrial, field: F, dim: IntRange | Choices, lo: int | None = None, hi: int | None = None
) -> int:
    name = field.value
    if isinstance(dim, Choices):
        value = int(trial.suggest_categorical(name, [int(c) for c in dim.choices]))
        if lo is not None:
            value = max(value, lo)
        if hi is not None:
            value = min(value, hi)
        return value
    low = dim.low if lo is None else max(dim.low, lo)
    high = dim.high if hi is None else min(dim.high, hi)
    if low > high:  # the rule leaves nothing inside the range: take the closest legal value
        low = high = max(lo or dim.low, min(hi or dim.high, dim.low))
    if dim.step > 1 and (high - low) % dim.step:
        high = low + (high - low) // dim.step * dim.step
    return trial.suggest_int(name, low, high, step=dim.step, log=dim.log and dim.step == 1)


def _suggest_float(trial: BaseTrial, field: F, dim: FloatRange | Choices) -> float:
    name = field.value
    if isinstance(dim, Choices):
        return float(trial.suggest_categorical(name, [float(c) for c in dim.choices]))
    return trial.suggest_float(name, dim.low, dim.high, step=dim.step, log=dim.log and dim.step is None)


def suggest_config(trial: BaseTrial, space: SearchSpace) -> ServerConfig:
    mem = _suggest_float(trial, F.MEM_FRACTION_STATIC, space.mem_fraction_static)
    graph_bs = _suggest_int(trial, F.CUDA_GRAPH_MAX_BS, space.cuda_graph_max_bs)
    mrr = _suggest_int(trial, F.MAX_RUNNING_REQUESTS, space.max_running_requests)
    if trial.user_attrs.get(TrialAttr.BASELINE):
        return make_config(mem, graph_bs, mrr)
    steps = _suggest_int(trial, F.SPECULATIVE_NUM_STEPS, space.speculative_num_steps)
    topk = _suggest_int(trial, F.SPECULATIVE_EAGLE_TOPK, space.speculative_eagle_topk)
    if topk == 1:
        adaptive = AdaptiveMode.OFF
        if space.speculative_adaptive != [AdaptiveMode.OFF]:
            modes = [m.value for m in space.speculative_adaptive]
            adaptive = AdaptiveMode(trial.suggest_categorical(F.SPECULATIVE_ADAPTIVE.value, modes))
        return make_config(mem, graph_bs, mrr, steps, topk, steps + 1, adaptive)
    draft = _suggest_int(
        trial,
        F.SPECULATIVE_NUM_DRAFT_TOKENS,
        space.speculative_num_draft_tokens,
        *draft_token_bounds(steps, topk),
    )
    return make_config(mem, graph_bs, mrr, steps, topk, draft)


def baseline_config(space: SearchSpace, known: ServerConfig | None) -> dict[str, Any]:
    """Memory settings for the no-speculation baseline: the first known-good's, else the middle."""
    if known is not None:
        return memory_params(known)

    def middle(dim: FloatRange | IntRange | Choices) -> float:
        if isinstance(dim, Choices):
            return sorted(dim.choices)[len(dim.choices) // 2]
        return (dim.low + dim.high) / 2

    return {
        F.MEM_FRACTION_STATIC.value: middle(space.mem_fraction_static),
        F.CUDA_GRAPH_MAX_BS.value: int(middle(space.cuda_graph_max_bs)),
        F.MAX_RUNNING_REQUESTS.value: int(middle(space.max_running_requests)),
    }


def memory_params(config: ServerConfig) -> dict[str, Any]:
    """The Optuna params of a configuration's memory values alone (a baseline's)."""
    return {
        F.MEM_FRACTION_STATIC.value: config.mem_fraction_static,
        F.CUDA_GRAPH_MAX_BS.value: config.cuda_graph_max_bs,
        F.MAX_RUNNING_REQUESTS.value: config.max_running_requests,
    }


# -- every configuration a space holds, enumerated through suggest_config ----------------------------------


class PathTrial:
    """Stands in for an `optuna.Trial` and answers each suggestion with the option a path picks.

    Walking every path enumerates the tree of suggestions, so the draft-token range that depends on steps
    and top-k is handled by `suggest_config` itself. A held dimension is not enumerated: it takes its first
    option (a range's low end).
    """

    def __init__(self, path: Sequence[int], held: Collection[str] = ()) -> None:
        self.path = path
        self.held = held
        self.sizes: list[int] = []
        self.user_attrs: dict[str, Any] = {}

    def _pick(self, name: str, options: Sequence[Any]) -> Any:
        if name in self.held:
            return options[0]
        depth = len(self.sizes)
        self.sizes.append(len(options))
        return options[self.path[depth] if depth < len(self.path) else 0]

    def suggest_float(
        self, name: str, low: float, high: float, *, step: float | None = None, log: bool = False
    ) -> float:
        if name in self.held:
            return low
        if step is None:
            raise ValueError(f"{name}: a continuous range cannot be enumerated; give it a step")
        return float(self._pick(name, stepped(low, high, step)))

    def suggest_int(self, name: str, low: int, high: int, *, step: int = 1, log: bool = False) -> int:
        return int(self._pick(name, range(low, high + 1, step)))

    def suggest_categorical(self, name: str, choices: Sequence[Any]) -> Any:
        return self._pick(name, list(choices))


def space_configs(space: SearchSpace, held: Collection[str] = ()) -> list[ServerConfig]:
    """Every distinct configuration `suggest_config` can return for `space`, in depth-first order (the
    order of the dimensions in the spec, each ascending), the dimensions in `held` at their first option."""
    seen: dict[ServerConfig, None] = {}

    def explore(prefix: list[int]) -> None:
        trial = PathTrial(prefix, held)
        config = suggest_config(cast(BaseTrial, trial), space)
        if len(prefix) >= len(trial.sizes):
            seen.setdefault(config, None)
            return
        for k in range(trial.sizes[len(prefix)]):
            explore([*prefix, k])

    explore([])
    return list(seen)
