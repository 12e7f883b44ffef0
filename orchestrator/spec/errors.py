"""A pydantic validation error of the spec, in the spec's own words: one line per field, naming what was
given and what would be accepted.

Pydantic names the members of a union in its locations (`function-after[_ordered(), IntRange]`,
`Choices`, `str`, `list[WeightedDataset]`) and reports every member's complaint; a user wrote one of them.
For a searched field the member meant is read from the keys given (`choices` or `low`/`high`); for a union
of kinds (a string or a list) from the kind of value given. Only that member's complaints are shown, under
the field's own name; a value of none of the kinds is one line saying what each form looks like.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import ValidationError

from orchestrator.spec.dataset_ref import DatasetKind

# A study name is a folder under --out and an MLflow experiment: one plain path component.
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"
# Patterns in plain words (pydantic would print the regular expression).
PATTERN_WORDS = {
    NAME_PATTERN: "a plain name: letters, digits, '_', '.' and '-', starting with a letter or digit "
    "(it names a folder under --out and the MLflow experiment)",
}
# What each union field accepts, for a value of none of its kinds.
DATASET_FORMS = (
    "one dataset as a string (random, generated-chat, 'sharegpt: PATH' or 'jsonl: PATH'), or a list of "
    "{source: ..., weight: ...} mixed by weight"
)
UNION_FORMS = {
    "workload.dataset": DATASET_FORMS,
    "simulated.profile": "a built-in profile name, a YAML file's path, or a mapping of profile fields",
}
# An example of a good value, for a field given empty.
EXAMPLES = {
    "workload.concurrency": "[8, 16]",
    "search.speculative_adaptive": "[off]",
    # each searched field's own (a top-k of 64 is no example): an engine's own value gets none
    **{
        f"search.{name}.choices": example
        for name, example in {
            "mem_fraction_static": "[0.85, 0.9]",
            "cuda_graph_max_bs": "[64, 128]",
            "max_running_requests": "[32, 64]",
            "speculative_num_steps": "[2, 3]",
            "speculative_eagle_topk": "[1, 4]",
            "speculative_num_draft_tokens": "[4, 8]",
        }.items()
    },
}
# A message that starts by naming its field (`workload.concurrency: ...`), as a check across sections does.
FIELD_FIRST = re.compile(r"^[a-z_]+(\.[a-z_0-9]+)+: ")
_KIND_TAG = re.compile(r"^(str|int|float|bool)$|^(list|dict)\[")
_KINDS: dict[str, type] = {"str": str, "int": int, "float": float, "bool": bool, "list": list, "dict": dict}
_KIND_WORDS = {str: "a string", int: "a whole number", float: "a number", bool: "true or false"}

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


def _given(value: Any) -> str:
    """What was written, in plain words (short: a long mapping is cut)."""
    if value is None:
        return "nothing (an empty value)"
    if isinstance(value, bool):
        return f"{str(value).lower()} (true/false)"
    if isinstance(value, dict):
        text = repr(value)
        return f"a mapping {text if len(text) <= 80 else text[:77] + '...'}"
    if isinstance(value, list):
        return "an empty list" if not value else f"the list {value!r}"[:100]
    if isinstance(value, str):
        return repr(value)
    return f"{value!r}"


def _number(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


# What a value of the wrong kind must be, by pydantic's error type, in the words a union's kinds use.
_MUST_BE: dict[str, str] = {
    **dict.fromkeys(("int_parsing", "int_type", "int_from_float"), _KIND_WORDS[int]),
    **dict.fromkeys(("float_parsing", "float_type"), _KIND_WORDS[float]),
    **dict.fromkeys(("bool_parsing", "bool_type"), _KIND_WORDS[bool]),
    "string_type": _KIND_WORDS[str],
    "list_type": "a list ([a, b] or one '- item' per line)",
    **dict.fromkeys(("dict_type", "model_type", "model_attributes_type"), "a mapping (key: value lines)"),
}


def _message(item: Any, where: str = "") -> str:
    """Pydantic's complaint as what was given and what is accepted (``where``: the field, for examples)."""
    kind, ctx, given = item["type"], item.get("ctx") or {}, _given(item.get("input"))
    if kind == "extra_forbidden":
        return "unknown key; check its spelling against trials/demo.yaml"
    if kind == "missing":
        return "required; add it"
    bounds = {
        "greater_than": ("above", "gt"),
        "greater_than_equal": ("at least", "ge"),
        "less_than": ("below", "lt"),
        "less_than_equal": ("at most", "le"),
    }
    if kind in bounds:
        words, key = bounds[kind]
        return f"must be {words} {_number(ctx.get(key))}, got {given}"
    if kind == "string_pattern_mismatch":
        pattern = str(ctx.get("pattern", ""))
        return f"got {given}; give {PATTERN_WORDS.get(pattern, f'a string matching {pattern}')}"
    if kind == "too_short":
        least = ctx.get("min_length", 1)
        if item.get("input") in ("", None) or isinstance(item.get("input"), str):
            return f"got {given}; give at least {least} character{'s' if least != 1 else ''}"
        example = EXAMPLES.get(where) or EXAMPLES.get(where.rsplit(".", 1)[-1])
        tail = f", e.g. {example}" if example else ""
        return f"got {given}; give at least {least} item{'s' if least != 1 else ''}{tail}"
    if kind == "string_too_short":
        return f"got {given}; it must not be empty"
    if kind in _MUST_BE:
        return f"must be {_MUST_BE[kind]}, got {given}"
    if kind in ("literal_error", "enum"):
        return f"must be {ctx.get('expected', 'one of the listed values')}, got {given}"
    # Our own validators' messages already say what to do; pydantic's others get the value appended.
    msg = str(item["msg"]).removeprefix("Value error, ").replace("Input should be", "must be")
    return msg if kind == "value_error" else f"{msg}, got {given}"


def _kind_of(part: Any) -> type | None:
    """The kind a location part names when it is a member of a union of kinds (`str`, `list[...]`)."""
    match = _KIND_TAG.match(part) if isinstance(part, str) else None
    return _KINDS[match.group(1) or match.group(2)] if match else None


def _is(value: Any, kind: type) -> bool:
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, kind)


def _none_of(where: str, value: Any, kinds: list[type]) -> str:
    forms = UNION_FORMS.get(where) or " or ".join(_KIND_WORDS.get(k, k.__name__) for k in kinds)
    line = f"  - {where}: got {_given(value)}; give {forms}"
    if where == "workload.dataset" and isinstance(value, dict) and len(value) == 1:
        # `dataset:` then `sharegpt: PATH` on the next line is YAML for a mapping: show the string.
        ((key, path),) = value.items()
        if key in {k.value for k in DatasetKind}:
            line += f'; write it on one line, quoted: dataset: "{key}: {path}"'
    if where == "workload.dataset" and isinstance(value, dict) and "source" in value:
        line += "; a mix is a list: dataset: [{source: ..., weight: ...}]"
    return line


def describe(err: ValidationError, source: str, data: Any) -> str:
    lines = [f"{source}: the spec is not valid:"]
    seen: set[str] = set()
    errors = err.errors()
    # The kinds each union field accepts (location up to its kind tag -> the kinds named there).
    union_kinds: dict[tuple[Any, ...], list[type]] = {}
    for item in errors:
        loc = tuple(item["loc"])
        for i, part in enumerate(loc):
            kind = _kind_of(part)
            if kind is not None:
                union_kinds.setdefault(loc[:i], []).append(kind)
                break
    for item in errors:
        loc = tuple(item["loc"])
        tag = next((i for i, part in enumerate(loc) if _kind_of(part) is not None), None)
        if tag is not None:
            field, kind = loc[:tag], _kind_of(loc[tag])
            value = _value_at(data, field)
            kinds = union_kinds[field]
            if not any(_is(value, k) for k in kinds):
                line = _none_of(".".join(str(p) for p in field), value, kinds)
                if line not in seen:
                    seen.add(line)
                    lines.append(line)
                continue
            if kind is None or not _is(value, kind):
                continue  # the member of another kind: not what the user wrote
            loc = field + loc[tag + 1 :]
        cut = next((i for i, part in enumerate(loc) if _branch(part)), None)
        if cut is None:
            where = ".".join(str(p) for p in loc) or "(top level)"
            line = f"  - {where}: {_message(item, where)}"
            if not loc and FIELD_FIRST.match(_message(item, where)):
                line = f"  - {_message(item, where)}"  # a check across sections names its own field
        else:
            field, inner = loc[:cut], loc[cut + 1 :]
            where = ".".join(str(p) for p in field)
            meant = _meant(_value_at(data, field))
            if meant is None:
                line = f"  - {where}: got {_given(_value_at(data, field))}; give {DIM_FORMS}"
            elif _branch(loc[cut]) != meant:
                continue  # the other member of the union: not what the user wrote
            else:
                key = ".".join(str(p) for p in inner)
                line = f"  - {where}: {key + ': ' if key else ''}{_message(item, f'{where}.{key}')}"
        if line not in seen:
            seen.add(line)
            lines.append(line)
    return "\n".join(lines)
