"""A pydantic validation error of the spec, in the spec's own words: one line per field and its fix.

Pydantic names the members of a union in its locations (`function-after[_ordered(), IntRange]`,
`Choices`) and reports every member's complaint; a user wrote one of them. For a searched field the
member meant is read from the keys given (`choices` or `low`/`high`), and only its complaints are shown,
under the field's own name.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

_RANGE_KEYS = frozenset({"low", "high", "step", "log"})
DIM_FORMS = "{low: L, high: H} (step and log optional) or {choices: [V, ...]}"


def _branch(part: Any) -> str | None:
    """'range' or 'choices' when a location part names a member of a range/choices union."""
    if not isinstance(part, str):
        return None
    if "IntRange" in part or "FloatRange" in part:
        return "range"
    if part == "Choices":
        return "choices"
    return None


def _value_at(data: Any, path: tuple[Any, ...]) -> Any:
    for part in path:
        try:
            data = data[part]
        except (KeyError, IndexError, TypeError):
            return None
    return data


def _meant(value: Any) -> str | None:
    if not isinstance(value, dict):
        return None
    if "choices" in value:
        return "choices"
    if _RANGE_KEYS & value.keys():
        return "range"
    return None


def _message(item: Any) -> str:
    # Pydantic's "Input should be greater than 0" is about the value the user wrote: say so plainly.
    msg = str(item["msg"]).removeprefix("Value error, ").replace("Input should be", "must be")
    if item["type"] == "extra_forbidden":
        return "unknown key; check its spelling against trials/demo.yaml"
    if item["type"] == "missing":
        return "required; add it"
    return msg


def describe(err: ValidationError, source: str, data: Any) -> str:
    lines = [f"{source}: the spec is not valid:"]
    seen: set[str] = set()
    for item in err.errors():
        loc = tuple(item["loc"])
        cut = next((i for i, part in enumerate(loc) if _branch(part)), None)
        if cut is None:
            where = ".".join(str(p) for p in loc) or "(top level)"
            line = f"  - {where}: {_message(item)}"
        else:
            field, inner = loc[:cut], loc[cut + 1 :]
            where = ".".join(str(p) for p in field)
            meant = _meant(_value_at(data, field))
            if meant is None:
                line = f"  - {where}: give {DIM_FORMS}"
            elif _branch(loc[cut]) != meant:
                continue  # the other member of the union: not what the user wrote
            else:
                key = ".".join(str(p) for p in inner)
                line = f"  - {where}: {key + ': ' if key else ''}{_message(item)}"
        if line not in seen:
            seen.add(line)
            lines.append(line)
    return "\n".join(lines)
