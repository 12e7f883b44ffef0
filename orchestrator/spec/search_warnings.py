"""The search warning printed before a sweep starts: searched values the engine serves as one server.

Valid, and nothing is wasted (the driver launches each server once and answers its other names from the
record, `spec.engine_catalog.server_of`), but such a dimension searches less than it looks: the users'
own notes searched graph batches up to 512 under 48 running requests, which SGLang serves as 48. Advice,
not an error; the CLI prints it under the spec's summary.
"""

from __future__ import annotations

import math

from orchestrator.spec import engine_catalog
from orchestrator.spec.engine_space import RuleKind, SameServer
from orchestrator.spec.search import Choices, FloatRange, IntRange, SearchSpace
from orchestrator.spec.sweep_spec import SweepSpec

Dim = FloatRange | IntRange | Choices


def one_server_warnings(spec: SweepSpec) -> list[str]:
    """One note per rule of the engine under which several searched values of a field are one server."""
    notes = []
    for rule in engine_catalog.same_server(spec.engine):
        values = _values(_dim(spec, rule.name))
        if len(values) < 2:
            continue
        note = _capped(spec, rule, values) if rule.kind is RuleKind.CAPPED else _stepped(spec, rule, values)
        if note:
            notes.append(note)
    return notes


def _capped(spec: SweepSpec, rule: SameServer, values: list[float]) -> str:
    caps = _values(_dim(spec, rule.at))
    if not caps:
        return ""
    top = max(caps)
    same = [v for v in values if v >= top]
    if len(same) < 2:
        return ""
    return (
        f"note: {_key(rule.name)}: {_words(same)} are one server at every {rule.at} searched "
        f"(at most {top:g}): the {spec.engine} engine serves a {rule.name} above {rule.at} as {rule.at}'s; "
        f"each is launched once, and its other names are answered from its record. Keep one of them, or "
        f"raise {_key(rule.at)}"
    )


def _stepped(spec: SweepSpec, rule: SameServer, values: list[float]) -> str:
    groups: dict[float, list[float]] = {}
    for v in values:
        groups.setdefault(math.floor(v / rule.step + 1e-9), []).append(v)
    same = next((g for g in groups.values() if len(g) > 1), None)
    if same is None:
        return ""
    return (
        f"note: {_key(rule.name)}: {_words(same)} are one server: the {spec.engine} engine takes it in "
        f"steps of {rule.step:g}; each is launched once, and its other names are answered from its record. "
        f"Keep one of them"
    )


def _dim(spec: SweepSpec, name: str) -> Dim | None:
    own = spec.search.engine.get(name)
    if own is not None:
        return own
    dim = getattr(spec.search, name, None) if name in SearchSpace.model_fields else None
    return dim if isinstance(dim, FloatRange | IntRange | Choices) else None


def _values(dim: Dim | None) -> list[float]:
    """The values a dimension searches, ascending; none for a continuous range (it has no list)."""
    if isinstance(dim, Choices):
        return sorted(set(dim.choices))
    if isinstance(dim, IntRange):
        return [float(v) for v in range(dim.low, dim.high + 1, dim.step)]
    return []


def _key(name: str) -> str:
    """Where the spec searches ``name``: the search section's own key, or its `engine` block."""
    return f"search.{name}" if name in SearchSpace.model_fields else f"search.engine.{name}"


def _words(values: list[float]) -> str:
    text = [f"{v:g}" for v in values]
    return ", ".join(text[:-1]) + f" and {text[-1]}"
