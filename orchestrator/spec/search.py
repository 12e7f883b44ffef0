"""The spec's search section: the ranges searched, the known-good configurations, SGLang's rules.

A configuration is built with the rules the engine declares for the values it sets itself
(``make_config``: SGLang's by default, whose fields the speculative values are), and a known-good
configuration is checked to be a point of the search space before any GPU is claimed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator

from orchestrator.config.adaptive import AdaptiveMode, launch_steps
from orchestrator.config.draft_tree import draft_tokens_problem
from orchestrator.config.fields import NUMERIC_FIELDS, SearchedField
from orchestrator.config.served import launched_as
from orchestrator.errors import ErrorKind, SpecsweepError
from orchestrator.records import ServerConfig
from orchestrator.spec import engine_catalog
from orchestrator.spec.engine_space import Forced

# The numeric searched values (each a field of SearchSpace and KnownGood; tests check they match).
SEARCHED_PARAMS: tuple[str, ...] = tuple(f.value for f in NUMERIC_FIELDS)


class SpecError(SpecsweepError, ValueError):
    """A spec (or a flag) that cannot be run. The message names the field and the fix. Still a
    `ValueError`, as pydantic's validators and the callers that catch it expect."""

    kind = ErrorKind.BAD_INPUT


def _yaml_off(mode: Any) -> Any:
    return AdaptiveMode.OFF if mode is False else mode


# An adaptive mode as the spec's YAML writes it: YAML reads a bare `off` as false, taken as the mode it
# was meant to be (the search section's list of modes and a known-good configuration's one mode alike).
YamlMode = Annotated[AdaptiveMode, BeforeValidator(_yaml_off)]


class SpecModel(BaseModel):
    """Every spec section: unknown keys are errors, and a parsed spec never changes."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def _collapsed(low: float, high: float, step: float) -> str:
    """A step wider than its range: only ``low`` would ever be searched, silently."""
    return (
        f"step {_num(step)} leaves one value of {_num(low)}..{_num(high)} ({_num(low)} only); give a step of "
        f"at most {_num(round(high - low, 10))}, or low = high for one value on purpose"
    )


class FloatRange(SpecModel):
    low: float
    high: float
    step: float | None = None
    log: bool = False

    @model_validator(mode="after")
    def _ordered(self) -> FloatRange:
        if self.low > self.high:
            raise ValueError(f"low ({self.low}) is above high ({self.high}); swap them")
        if self.step is not None and self.step <= 0:
            raise ValueError(f"step must be above 0 (got {self.step}); leave it out for a continuous range")
        if self.step is not None and self.low < self.high and self.low + self.step > self.high + 1e-9:
            raise ValueError(_collapsed(self.low, self.high, self.step))
        return self


class IntRange(SpecModel):
    low: int
    high: int
    step: int = 1
    log: bool = False

    @model_validator(mode="after")
    def _ordered(self) -> IntRange:
        if self.low > self.high:
            raise ValueError(f"low ({self.low}) is above high ({self.high}); swap them")
        if self.step < 1:
            raise ValueError("step must be at least 1")
        if self.low < self.high and self.low + self.step > self.high:
            raise ValueError(_collapsed(self.low, self.high, self.step))
        return self


class Choices(SpecModel):
    choices: list[float] = Field(min_length=1)


FloatDim = FloatRange | Choices
IntDim = IntRange | Choices


class SearchSpace(SpecModel):
    """Ranges (`{low, high, step}`) or `{choices: [...]}` for each searched flag.

    The three speculative values are searched together, as SGLang requires. With top-k 1 SGLang forces
    draft tokens = steps + 1, so that value is derived rather than searched; with top-k > 1 draft tokens
    is searched between steps + 1 and top-k * steps + 1 (the size of the draft tree), clipped to its range.
    """

    mem_fraction_static: FloatDim
    cuda_graph_max_bs: IntDim
    max_running_requests: IntDim
    speculative_num_steps: IntDim
    speculative_eagle_topk: IntDim
    speculative_num_draft_tokens: IntDim
    speculative_adaptive: list[YamlMode] = Field(
        default_factory=lambda: [AdaptiveMode.OFF],
        min_length=1,
        description="SGLang's runtime speculation policy (0.5.17+, top-k 1 only): off, default "
        "(SGLang's tiers) and/or tiers (built from the trial's steps)",
    )
    engine: dict[str, FloatRange | Choices] = Field(
        default_factory=dict,
        description="the engine's own searched values, those its space declares beyond the fields above, "
        "by the engine's name for each: a range or choices (SGLang declares none)",
    )

    @field_validator("mem_fraction_static")
    @classmethod
    def _fraction(cls, dim: FloatDim) -> FloatDim:
        lo, hi = _dim_bounds(dim)
        if not (lo > 0.0 and hi < 1.0):
            raise ValueError(f"values must lie strictly between 0 and 1 (SGLang's range), got {lo}..{hi}")
        return dim

    @field_validator(*(f.value for f in NUMERIC_FIELDS if f.kind is int))
    @classmethod
    def _whole_positive(cls, dim: IntDim) -> IntDim:
        lo, _ = _dim_bounds(dim)
        if lo < 1:
            given = (
                f"choices {[_num(c) for c in dim.choices]}" if isinstance(dim, Choices) else f"low {_num(lo)}"
            )
            raise ValueError(f"values must be whole numbers of at least 1; {given} has {_num(lo)}")
        if isinstance(dim, Choices) and any(float(c) != int(c) for c in dim.choices):
            odd = [_num(c) for c in dim.choices if float(c) != int(c)]
            raise ValueError(f"choices must be whole numbers; {odd} are not")
        return dim

    @field_validator("engine")
    @classmethod
    def _own_names(cls, dims: dict[str, FloatRange | Choices]) -> dict[str, FloatRange | Choices]:
        taken = [name for name in dims if name in {f.value for f in SearchedField} or name == "engine"]
        if taken:
            raise ValueError(
                f"{', '.join(taken)}: a field of the search section itself; set it there, and keep this "
                "section for the engine's own values"
            )
        return dims

    def engine_defaults(self) -> dict[str, float]:
        """The engine's own values where nothing chose them yet (the baseline, a known-good configuration,
        the policy's structure): each one's middle value, as the baseline's memory flags are the middle of
        theirs without a prior; a range's middle on its step."""
        out: dict[str, float] = {}
        for name, dim in self.engine.items():
            if isinstance(dim, Choices):
                out[name] = float(sorted(dim.choices)[len(dim.choices) // 2])
            elif dim.step:
                out[name] = dim.low + round((dim.high - dim.low) / 2 / dim.step) * dim.step
            else:
                out[name] = (dim.low + dim.high) / 2
        return out

    @model_validator(mode="after")
    def _bounds(self) -> SearchSpace:
        steps_lo, _ = _dim_bounds(self.speculative_num_steps)
        _, draft_hi = _dim_bounds(self.speculative_num_draft_tokens)
        if draft_hi < steps_lo + 1 and _dim_bounds(self.speculative_eagle_topk)[1] > 1:
            raise ValueError(
                "speculative_num_draft_tokens: its largest value must be at least "
                "speculative_num_steps + 1 (SGLang verifies steps + 1 tokens at least)"
            )
        topk_lo, _ = _dim_bounds(self.speculative_eagle_topk)
        if AdaptiveMode.OFF not in self.speculative_adaptive and topk_lo > 1:
            # Every configuration of this space would be refused when built (`make_config`).
            modes = [m.value for m in self.speculative_adaptive]
            raise ValueError(
                f"speculative_adaptive: {modes} runs with top-k 1 only (SGLang), and speculative_eagle_topk "
                f"starts at {_num(topk_lo)}, so no configuration searched can run; add off to "
                "search.speculative_adaptive, or 1 to search.speculative_eagle_topk"
            )
        return self


def _dim_bounds(dim: FloatRange | IntRange | Choices) -> tuple[float, float]:
    if isinstance(dim, Choices):
        return min(dim.choices), max(dim.choices)
    return dim.low, dim.high


class KnownGood(SpecModel):
    """A configuration known to work (from earlier runs or a colleague): tried first."""

    mem_fraction_static: float = Field(gt=0, lt=1)
    cuda_graph_max_bs: int = Field(ge=1)
    max_running_requests: int = Field(ge=1)
    speculative_num_steps: int = Field(ge=1)
    speculative_eagle_topk: int = Field(ge=1)
    speculative_num_draft_tokens: int | None = Field(default=None, ge=2)
    speculative_adaptive: YamlMode = AdaptiveMode.OFF

    def to_config(self) -> ServerConfig:
        return make_config(
            self.mem_fraction_static,
            self.cuda_graph_max_bs,
            self.max_running_requests,
            self.speculative_num_steps,
            self.speculative_eagle_topk,
            self.speculative_num_draft_tokens,
            self.speculative_adaptive,
        )


def searched_fields(space: SearchSpace) -> list[str]:
    """The fields ``space`` searches over more than one value, in its order."""
    names = [name for name in SEARCHED_PARAMS if len(set(_values(getattr(space, name)))) > 1]
    adaptive = [SearchedField.SPECULATIVE_ADAPTIVE.value] if len(set(space.speculative_adaptive)) > 1 else []
    return names + adaptive + [name for name, dim in space.engine.items() if len(set(_values(dim))) > 1]


def _values(dim: FloatRange | IntRange | Choices) -> list[float]:
    if isinstance(dim, Choices):
        return [float(c) for c in dim.choices]
    return [dim.low, dim.high]


def make_config(
    mem_fraction_static: float,
    cuda_graph_max_bs: int,
    max_running_requests: int,
    speculative_num_steps: int | None = None,
    speculative_eagle_topk: int | None = None,
    speculative_num_draft_tokens: int | None = None,
    speculative_adaptive: AdaptiveMode = AdaptiveMode.OFF,
    engine_values: Mapping[str, float] | None = None,
    *,
    forced: Sequence[Forced] = engine_catalog.forced(engine_catalog.EngineName.SGLANG),
) -> ServerConfig:
    """Build a configuration as the engine will run it: the values named, like every field of
    `ServerConfig`, after SGLang's flags, with the engine's `forced` rules applied (SGLang's by default,
    whose fields the speculative values are; `engine_catalog.forced` gives another engine's);
    `engine_values` are the engine's own, kept as given but where a rule sets them."""
    steps, topk, draft_tokens = speculative_num_steps, speculative_eagle_topk, speculative_num_draft_tokens
    adaptive = speculative_adaptive
    if adaptive is not AdaptiveMode.OFF:
        if steps is None or topk != 1:
            raise SpecError("speculative_adaptive: SGLang supports it with speculative_eagle_topk 1 only")
        steps = launch_steps(adaptive, steps)  # launched at the largest tier, as SGLang needs
    if steps is not None:
        if topk is None:
            raise SpecError("speculative_eagle_topk: set it together with speculative_num_steps")
        if draft_tokens is None:
            draft_tokens = steps + 1  # none asked: the chain, the smallest tree that drafts
    config = ServerConfig(
        mem_fraction_static=round(float(mem_fraction_static), 4),
        cuda_graph_max_bs=int(cuda_graph_max_bs),
        max_running_requests=int(max_running_requests),
        speculative_num_steps=steps,
        speculative_eagle_topk=topk,
        speculative_num_draft_tokens=draft_tokens,
        speculative_adaptive=None if adaptive is AdaptiveMode.OFF else adaptive.value,
        engine_values=tuple(sorted((name, float(v)) for name, v in (engine_values or {}).items())),
    )
    config = launched_as(config, forced)
    if steps is not None and (config.speculative_num_draft_tokens or 0) < 2:
        raise SpecError("speculative_num_draft_tokens: must be at least 2")
    return config


def known_good_problems(
    known: KnownGood,
    space: SearchSpace,
    index: int,
    forced: Sequence[Forced] = engine_catalog.forced(engine_catalog.EngineName.SGLANG),
) -> list[str]:
    """Why a known-good configuration is not a point of the search space (empty when it is).

    Optuna can only enqueue a point of the space, and a value the engine would silently set itself (its
    `forced` rules, those `KnownGood.to_config` applies: SGLang's draft tokens under top-k 1) would be
    measured as another configuration than the one the user wrote down.
    """
    where = f"known_good.{index}"
    problems = []
    for name in SEARCHED_PARAMS:
        value = getattr(known, name)
        if value is None:
            continue
        dim = getattr(space, name)
        if name == "speculative_num_draft_tokens" and known.speculative_eagle_topk != 1:
            continue  # checked against the draft tree below, which may be narrower than the range
        why = _not_in_dim(value, dim) if name != "speculative_num_draft_tokens" else None
        if why:
            problems.append(f"{where}.{name}: {value} {why}; change it or widen search.{name}")
    if known.speculative_adaptive not in space.speculative_adaptive:
        problems.append(
            f"{where}.speculative_adaptive: {known.speculative_adaptive.value} is not one of the searched "
            f"modes {[m.value for m in space.speculative_adaptive]}; change it or widen "
            "search.speculative_adaptive"
        )
    elif known.speculative_adaptive is not AdaptiveMode.OFF and known.speculative_eagle_topk != 1:
        problems.append(
            f"{where}.speculative_adaptive: SGLang runs adaptive speculation with top-k 1 only; "
            "set speculative_eagle_topk to 1 or speculative_adaptive to off"
        )
    problems += _forced_problems(known, where, forced)
    steps, topk, draft = (
        known.speculative_num_steps,
        known.speculative_eagle_topk,
        known.speculative_num_draft_tokens,
    )
    if draft is not None and topk > 1:
        why = _not_in_dim(draft, space.speculative_num_draft_tokens)
        outside = draft_tokens_problem(steps, topk, draft)
        if outside:
            problems.append(f"{where}.speculative_num_draft_tokens: {outside}")
        elif why:
            problems.append(
                f"{where}.speculative_num_draft_tokens: {draft} {why}; change it or widen the search"
            )
    return problems


def _forced_problems(known: KnownGood, where: str, forced: Sequence[Forced]) -> list[str]:
    """The values `known` asks that the engine's `forced` rules set otherwise; a value left out is the
    engine's to set (an adaptive mode's launch steps are not the user's, so the rules read those written)."""
    asked = make_config(
        known.mem_fraction_static,
        known.cuda_graph_max_bs,
        known.max_running_requests,
        known.speculative_num_steps,
        known.speculative_eagle_topk,
        known.speculative_num_draft_tokens,
        forced=(),
    )
    problems = []
    for rule in forced:
        if getattr(known, rule.name, None) is None:
            continue  # left out, or no value a known-good configuration names: the engine's to set
        given, runs = getattr(asked, rule.name), getattr(launched_as(asked, (rule,)), rule.name)
        if runs != given:
            problems.append(
                f"{where}.{rule.name}: with {rule.when} {_num(rule.equals)} the engine runs {rule.base} + "
                f"{_num(rule.plus)} = {_num(runs)}, not {_num(given)}; write {_num(runs)} or leave it out"
            )
    return problems


def _not_in_dim(value: float, dim: FloatRange | IntRange | Choices) -> str | None:
    if isinstance(dim, Choices):
        if not any(abs(value - c) < 1e-9 for c in dim.choices):
            return f"is not one of the searched choices {[_num(c) for c in dim.choices]}"
        return None
    if not dim.low - 1e-9 <= value <= dim.high + 1e-9:
        return f"is outside the searched range {_num(dim.low)}..{_num(dim.high)}"
    if dim.step:
        k = (value - dim.low) / dim.step
        if abs(k - round(k)) > 1e-6:
            return f"is off the searched step grid ({_num(dim.low)} + n x step {_num(dim.step)})"
    return None


def _num(x: float) -> float | int:
    return int(x) if float(x).is_integer() else x


def stepped(low: float, high: float, step: float) -> list[float]:
    """The values of a stepped float range, ascending, `high` included when a step lands on it."""
    count = math.floor((high - low) / step + 1e-9) + 1
    return [round(low + k * step, 10) for k in range(count)]


def grid_values(dim: FloatRange | IntRange | Choices, *, integer: bool = False) -> list[float] | None:
    """Every value of a discrete field, ascending, each once (choices as ints with `integer`); None for a
    continuous range."""
    if isinstance(dim, Choices):
        return sorted({int(c) if integer else float(c) for c in dim.choices})
    if isinstance(dim, IntRange):
        return [float(v) for v in range(dim.low, dim.high + 1, dim.step)]
    if dim.step is None:
        return None
    return stepped(dim.low, dim.high, dim.step)
