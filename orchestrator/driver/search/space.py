"""The search space as Optuna sees it: suggesting a configuration, applying SGLang's rules, and the one
route between a trial's Optuna params and its configuration, both ways (`config_from_params`,
`params_for`).

The three speculative values are suggested together. With top-k 1 SGLang forces draft tokens to
steps + 1, so that value is derived, not searched; with top-k > 1 it is searched inside the draft
tree's size, [steps + 1, top-k * steps + 1] (a range narrowed before the draw, a choice clipped after it).

The Optuna params are the *searched* values, before SGLang's rules: under top-k 1 the draft tokens are
derived (not a param), an adaptive trial's ``speculative_num_steps`` is the searched steps its tiers are
built from, while the launch runs at the largest tier (`adaptive.launch_steps`), and a draft-token choice
is the one drawn, before the tree clips it. MLflow's params, the journal and the command line hold the
*launched* values, the configuration's own (`config.codec`). With SGLang's default tiers every searched
steps launches the same server (at its largest tier, 7), so those Optuna points are one configuration;
turned back into params it takes the searched steps of the space nearest to the launch's.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any, cast

from optuna.trial import BaseTrial

from orchestrator.config import adaptive
from orchestrator.config.adaptive import AdaptiveMode
from orchestrator.config.draft_tree import draft_token_bounds
from orchestrator.config.fields import SearchedField as F
from orchestrator.driver.store.trial_attrs import TrialAttr
from orchestrator.records import ServerConfig
from orchestrator.spec.search import (
    Choices,
    FloatRange,
    IntDim,
    IntRange,
    KnownGood,
    SearchSpace,
    SpecError,
    make_config,
    stepped,
)

ParamValue = float | int | str
_FIELDS = frozenset(f.value for f in F)


def _suggest_int(
    trial: BaseTrial, field: F, dim: IntRange | Choices, lo: int | None = None, hi: int | None = None
) -> int:
    """A drawn value: a range narrowed to ``[lo, hi]`` before the draw, a choice as drawn (whatever the
    bounds: a categorical's choices cannot depend on other params, so `config_from_params` clips it)."""
    name = field.value
    if isinstance(dim, Choices):
        return int(trial.suggest_categorical(name, [int(c) for c in dim.choices]))
    low = dim.low if lo is None else max(dim.low, lo)
    high = dim.high if hi is None else min(dim.high, hi)
    if low > high:  # the rule leaves nothing inside the range: take the closest legal value
        low = high = max(lo or dim.low, min(hi or dim.high, dim.low))
    if dim.step > 1 and (high - low) % dim.step:
        high = low + (high - low) // dim.step * dim.step
    return trial.suggest_int(name, low, high, step=dim.step, log=dim.log and dim.step == 1)


def _suggest_float(trial: BaseTrial, name: str, dim: FloatRange | Choices) -> float:
    """A drawn value under `name`: a searched field's (its `SearchedField` value) or an engine's own."""
    if isinstance(dim, Choices):
        return float(trial.suggest_categorical(name, [float(c) for c in dim.choices]))
    return trial.suggest_float(name, dim.low, dim.high, step=dim.step, log=dim.log and dim.step is None)


def suggest_config(trial: BaseTrial, space: SearchSpace) -> ServerConfig:
    """The configuration ``trial`` draws from ``space``: its params, drawn, and turned into a
    configuration by the one route every Optuna params take (`config_from_params`)."""
    return _config_of(_suggest_params(trial, space))


def _suggest_params(trial: BaseTrial, space: SearchSpace) -> dict[str, ParamValue]:
    """The params ``trial`` draws, as Optuna stores them. The three speculative values are drawn together;
    under top-k 1 the draft tokens are SGLang's (not drawn) and adaptive speculation may be; above it a
    draft-token range is drawn inside the tree's size."""
    params: dict[str, ParamValue] = {
        F.MEM_FRACTION_STATIC: _suggest_float(trial, F.MEM_FRACTION_STATIC.value, space.mem_fraction_static),
        F.CUDA_GRAPH_MAX_BS: _suggest_int(trial, F.CUDA_GRAPH_MAX_BS, space.cuda_graph_max_bs),
        F.MAX_RUNNING_REQUESTS: _suggest_int(trial, F.MAX_RUNNING_REQUESTS, space.max_running_requests),
    }
    # The engine's own values: not speculative, so the baseline draws them too.
    for name, dim in sorted(space.engine.items()):
        params[name] = _suggest_float(trial, name, dim)
    if trial.user_attrs.get(TrialAttr.BASELINE):
        return params
    steps = params[F.SPECULATIVE_NUM_STEPS] = _suggest_int(
        trial, F.SPECULATIVE_NUM_STEPS, space.speculative_num_steps
    )
    topk = params[F.SPECULATIVE_EAGLE_TOPK] = _suggest_int(
        trial, F.SPECULATIVE_EAGLE_TOPK, space.speculative_eagle_topk
    )
    if topk == 1:
        if space.speculative_adaptive != [AdaptiveMode.OFF]:
            modes = [m.value for m in space.speculative_adaptive]
            params[F.SPECULATIVE_ADAPTIVE] = str(
                trial.suggest_categorical(F.SPECULATIVE_ADAPTIVE.value, modes)
            )
        return params
    params[F.SPECULATIVE_NUM_DRAFT_TOKENS] = _suggest_int(
        trial,
        F.SPECULATIVE_NUM_DRAFT_TOKENS,
        space.speculative_num_draft_tokens,
        *draft_token_bounds(steps, topk),
    )
    return params


# -- Optuna's params and the configuration, both ways: one route each -------------------------------------


def config_from_params(params: Mapping[str, Any]) -> ServerConfig | None:
    """The configuration a trial's Optuna params stand for, as `suggest_config` made it: SGLang's rules
    applied (top-k 1 trials have no draft-token param; an adaptive one launches at its largest tier) and a
    draft-token choice outside its tree's size clipped into it; None when the params make none."""
    try:
        return _config_of(params)
    except (KeyError, TypeError, ValueError, SpecError):
        return None


def _config_of(params: Mapping[str, Any]) -> ServerConfig:
    base = (
        float(params[F.MEM_FRACTION_STATIC]),
        int(params[F.CUDA_GRAPH_MAX_BS]),
        int(params[F.MAX_RUNNING_REQUESTS]),
    )
    # every param that is no field of the configuration is one of the engine's own values
    own = {name: float(value) for name, value in params.items() if name not in _FIELDS}
    steps = params.get(F.SPECULATIVE_NUM_STEPS)
    if steps is None:
        return make_config(*base, engine_values=own)
    topk = int(params[F.SPECULATIVE_EAGLE_TOPK])
    draft = params.get(F.SPECULATIVE_NUM_DRAFT_TOKENS)
    if topk != 1 and draft is not None:
        # A drawn choice the tree cannot hold is clipped into it (a draw inside a range already is).
        low, high = draft_token_bounds(int(steps), topk)
        draft = min(max(int(draft), low), high)
    return make_config(
        *base,
        int(steps),
        topk,
        int(draft) if draft is not None else None,
        AdaptiveMode(params.get(F.SPECULATIVE_ADAPTIVE, AdaptiveMode.OFF.value)),
        own,
    )


def params_for(config: ServerConfig, space: SearchSpace | None = None) -> dict[str, ParamValue]:
    """The Optuna params `suggest_config` would have stored for `config` (to enqueue it): the inverse of
    `config_from_params`.

    With `space`, the params are a point of the space that gives `config` back: ``speculative_adaptive``
    only where it is searched, an adaptive configuration's steps a searched value that launches it, and a
    clipped draft-token count the choice that clips to it."""
    params: dict[str, ParamValue] = {
        F.MEM_FRACTION_STATIC: config.mem_fraction_static,
        F.CUDA_GRAPH_MAX_BS: config.cuda_graph_max_bs,
        F.MAX_RUNNING_REQUESTS: config.max_running_requests,
        **dict(config.engine_values),
    }
    steps, topk = config.speculative_num_steps, config.speculative_eagle_topk
    if steps is None or topk is None:
        return params
    mode = AdaptiveMode(config.speculative_adaptive or AdaptiveMode.OFF.value)
    params[F.SPECULATIVE_NUM_STEPS] = _searched_steps(mode, steps, space)
    params[F.SPECULATIVE_EAGLE_TOPK] = topk
    if topk != 1:
        if config.speculative_num_draft_tokens is not None:
            params[F.SPECULATIVE_NUM_DRAFT_TOKENS] = _drawn_draft(config, space)
    elif space is None or space.speculative_adaptive != [AdaptiveMode.OFF] or mode is not AdaptiveMode.OFF:
        params[F.SPECULATIVE_ADAPTIVE] = mode.value
    return params


def known_good_params(known: KnownGood, space: SearchSpace) -> dict[str, ParamValue]:
    """A known-good configuration's Optuna params, with the steps the user wrote: with adaptive
    speculation the launch's steps are the largest tier (outside the searched range for SGLang's
    defaults), and the user's are a searched value (`spec.search.known_good_problems` checks it)."""
    # a known-good configuration names SGLang's fields only: the engine's own values take their defaults
    params = {**space.engine_defaults(), **params_for(known.to_config(), space)}
    if F.SPECULATIVE_NUM_STEPS in params:
        params[F.SPECULATIVE_NUM_STEPS] = known.speculative_num_steps
    return params


def _searched_steps(mode: AdaptiveMode, launched: int, space: SearchSpace | None) -> int:
    """A searched steps that launches at ``launched``: itself when the space has it, else the space's
    value nearest to it among those that launch the same."""
    if mode is AdaptiveMode.OFF:
        return launched
    candidates = _int_values(space.speculative_num_steps) if space is not None else [launched]
    same = [s for s in candidates if adaptive.launch_steps(mode, s) == launched]
    return min(same, key=lambda s: (abs(s - launched), s)) if same else launched


def _drawn_draft(config: ServerConfig, space: SearchSpace | None) -> int:
    """The draft-token param that gives ``config``'s count: itself, or, where the space draws choices and
    the count is one the tree clipped a choice to, the choice nearest to it that clips to it (Optuna
    stores only a choice)."""
    draft = int(config.speculative_num_draft_tokens or 0)
    dim = space.speculative_num_draft_tokens if space is not None else None
    if not isinstance(dim, Choices) or draft in dim.choices:
        return draft
    low, high = draft_token_bounds(
        int(config.speculative_num_steps or 0), int(config.speculative_eagle_topk or 0)
    )
    same = [int(c) for c in dim.choices if min(max(int(c), low), high) == draft]
    return min(same, key=lambda c: (abs(c - draft), c)) if same else draft


def _int_values(dim: IntDim) -> list[int]:
    if isinstance(dim, Choices):
        return sorted(int(c) for c in dim.choices)
    return list(range(dim.low, dim.high + 1, dim.step))


def baseline_config(space: SearchSpace, known: ServerConfig | None) -> dict[str, Any]:
    """Memory settings for the no-speculation baseline: the first known-good's, else the middle."""
    if known is not None:
        return {**space.engine_defaults(), **memory_params(known)}

    def middle(dim: FloatRange | IntRange | Choices) -> float:
        if isinstance(dim, Choices):
            return sorted(dim.choices)[len(dim.choices) // 2]
        return (dim.low + dim.high) / 2

    return {
        F.MEM_FRACTION_STATIC.value: middle(space.mem_fraction_static),
        F.CUDA_GRAPH_MAX_BS.value: int(middle(space.cuda_graph_max_bs)),
        F.MAX_RUNNING_REQUESTS.value: int(middle(space.max_running_requests)),
        **space.engine_defaults(),
    }


def memory_params(config: ServerConfig) -> dict[str, Any]:
    """The Optuna params of a configuration without its speculation (a baseline's): its memory values and
    the engine's own values, which apply with or without speculation."""
    return {
        F.MEM_FRACTION_STATIC.value: config.mem_fraction_static,
        F.CUDA_GRAPH_MAX_BS.value: config.cuda_graph_max_bs,
        F.MAX_RUNNING_REQUESTS.value: config.max_running_requests,
        **dict(config.engine_values),
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
