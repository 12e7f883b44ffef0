"""The spec's `search.engine`: the values an engine declares beyond the search section's own fields,
checked against the engine's declared space (names, kind, bounds) before any GPU is claimed.

SGLang's space is the search section's own fields, declared when its engine loads, if at all: an engine
with no declared space has no value of its own, and any `search.engine` key is refused for it.
"""

from __future__ import annotations

from collections.abc import Mapping

from orchestrator.spec.engine_space import EngineSpace, FieldKind
from orchestrator.spec.search import Choices, FloatRange, SearchSpace


def own_value_problems(
    engine: str, space: EngineSpace | None, dims: Mapping[str, FloatRange | Choices]
) -> str:
    """Why `dims` (the spec's `search.engine`) is no search of `engine`'s own values; '' when it is. A
    name the engine has no field for is refused with one value as much as with several: the engine would
    be given a value it has no flag for."""
    unknown = space.unknown(dims) if space is not None else list(dims)
    if unknown:
        names = own_fields(space) if space is not None else []
        return (
            f"search.engine: the {engine} engine has no {', '.join(unknown)}; remove "
            f"{'it' if len(unknown) == 1 else 'them'}, or name the engine's own fields"
            + (f": {', '.join(names)}" if names else " (it declares none)")
        )
    if space is None:
        return ""
    return "; ".join(p for name, dim in dims.items() if (p := _problem(space, name, dim)))


def own_fields(space: EngineSpace) -> list[str]:
    """The engine's own searched values: the fields of its space the search section has no key for."""
    return [name for name in space.names if name not in SearchSpace.model_fields]


def _problem(space: EngineSpace, name: str, dim: FloatRange | Choices) -> str:
    """Why `dim` is no search of the engine's own value `name` (its declared kind and bounds); ''."""
    field = space.field(name)
    if field is None:
        return ""
    where = f"search.engine.{name}"
    if field.kind is FieldKind.CHOICE:
        words = ", ".join(field.choices)
        return f"{where}: the engine's value takes words ({words}), not numbers: set it in server.flags"
    values = list(dim.choices) if isinstance(dim, Choices) else [dim.low, dim.high]
    low, high = field.low, field.high
    if low is not None and min(values) < low:
        return f"{where}: {min(values):g} is below the engine's least value, {low:g}; search from {low:g} up"
    if high is not None and max(values) > high:
        return (
            f"{where}: {max(values):g} is above the engine's largest value, {high:g}; search up to {high:g}"
        )
    whole = isinstance(dim, Choices) or (dim.step is not None and float(dim.step).is_integer())
    if field.kind is FieldKind.INT and (not whole or any(not float(v).is_integer() for v in values)):
        return (
            f"{where}: the engine takes whole numbers here; give whole choices, or a range with a whole step"
        )
    return ""
