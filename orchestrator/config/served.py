"""The server an engine makes of a configuration, by the engine's own rules (`spec.engine_space.SameServer`).

Two configurations the engine serves as one server are one measurement: the driver answers the second
from the first's record instead of launching it again, a finite space counts its servers rather than its
labels, and the proposal policy never launches a server it has measured under another name. The served
form is a key, never a launch: a trial launches the configuration it drew, as drawn.

What the engine launches whatever is asked (`spec.engine_space.Forced`) is another matter: those rules are
applied to the configuration itself as it is built (`launched_as`), so it records what runs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

from orchestrator.records import ServerConfig
from orchestrator.spec.engine_space import Forced, RuleKind, SameServer


def served_as(config: ServerConfig, rules: Sequence[SameServer]) -> ServerConfig:
    """`config` as the engine serves it under `rules`: every rule applied in order, to a field of the
    configuration or to one of the engine's own values (a rule for a value the configuration lacks, or
    capped by one it lacks, changes nothing)."""
    # Until nothing changes: a rule may change the value another rule reads (a step on what caps a
    # field), and the key must be the key of itself.
    for _ in range(len(rules) + 1):
        served = config
        for rule in rules:
            served = _apply(served, rule)
        if served == config:
            break
        config = served
    return config


def launched_as(config: ServerConfig, rules: Sequence[Forced]) -> ServerConfig:
    """`config` with each value the engine sets itself under `rules` set as it will run, in order (a rule
    whose value or whose condition the configuration lacks changes nothing)."""
    for rule in rules:
        base = _value(config, rule.base)
        if base is None or _value(config, rule.name) is None or _value(config, rule.when) != rule.equals:
            continue
        config = _with(config, rule.name, base + rule.plus)
    return config


def _apply(config: ServerConfig, rule: SameServer) -> ServerConfig:
    value = _value(config, rule.name)
    if value is None:
        return config
    if rule.kind is RuleKind.CAPPED:
        cap = _value(config, rule.at)
        if cap is None or value <= cap or (rule.where_at and cap not in rule.where_at):
            return config
        return _with(config, rule.name, cap)
    if rule.step > 0:
        return _with(config, rule.name, step_below(value, rule.step))
    return config


def step_below(value: float, step: float) -> float:
    """The multiple of `step` at or below `value`: what a STEPPED rule serves `value` at."""
    return round(math.floor(value / step + 1e-9) * step, 9)


def _value(config: ServerConfig, name: str) -> float | None:
    if name in ServerConfig.__dataclass_fields__:
        value = getattr(config, name)
        return float(value) if isinstance(value, int | float) else None
    return config.engine_value(name)


def _with(config: ServerConfig, name: str, value: float) -> ServerConfig:
    if name in ServerConfig.__dataclass_fields__:
        kind = type(getattr(config, name))
        return replace(config, **{name: kind(value)})
    values = tuple((key, value if key == name else v) for key, v in config.engine_values)
    return replace(config, engine_values=values)
