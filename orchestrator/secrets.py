"""Secrets passed to the server (`--api-key`, ...) never reach a file, a record or a log we keep.

Masking the saved command is not enough: SGLang prints every resolved value in its
`server_args=ServerArgs(..., api_key='...')` line, and the whole log travels to `runs/`, MLflow and the
failure messages the study keeps. So the trial scrubs the values themselves, wherever they appear, in
the log file on the node and in the result it sends back: nothing downstream ever sees them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from enum import Enum
from pathlib import Path
from typing import Any, TypeVar

# SGLang flags whose value is a credential; a spec may name more in `server.secret_flags`.
SECRET_FLAGS = frozenset({"--api-key", "--admin-api-key", "--ssl-keyfile-password", "--hf-token"})
MASK = "****"
MIN_LEN = 4  # a shorter "secret" would mask unrelated text everywhere; such a value is refused in the spec

T = TypeVar("T")


def secret_values(flags: Sequence[str], extra_flags: Iterable[str] = ()) -> tuple[str, ...]:
    """The values of every secret flag in an argument list (`--flag value` or `--flag=value`)."""
    names = SECRET_FLAGS | set(extra_flags)
    values: list[str] = []
    for i, arg in enumerate(flags):
        name, eq, value = arg.partition("=")
        if name not in names:
            continue
        if eq:
            values.append(value)
        elif i + 1 < len(flags):
            values.append(flags[i + 1])
    # Longest first, so that a secret containing another is replaced whole.
    return tuple(sorted({v for v in values if v}, key=len, reverse=True))


def mask_argv(argv: Sequence[str], extra_flags: Iterable[str] = ()) -> tuple[str, ...]:
    """The argument list with every secret flag's value replaced by the mask."""
    names = SECRET_FLAGS | set(extra_flags)
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            out.append(MASK)
            hide_next = False
            continue
        name, eq, _ = arg.partition("=")
        if name in names:
            out.append(f"{name}={MASK}" if eq else arg)
            hide_next = not eq
            continue
        out.append(arg)
    return tuple(out)


def scrub_text(text: str, values: Sequence[str]) -> str:
    for value in values:
        text = text.replace(value, MASK)
    return text


def scrub(obj: T, values: Sequence[str]) -> T:
    """`obj` with every secret replaced in every string it holds (frozen dataclasses, tuples, dicts)."""
    if not values:
        return obj
    scrubbed: T = _scrub(obj, values)
    return scrubbed


def _scrub(obj: Any, values: Sequence[str]) -> Any:
    if isinstance(obj, Enum):  # a StrEnum is a str, but its value is ours, never a secret
        return obj
    if isinstance(obj, str):
        return scrub_text(obj, values)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        changes = {f.name: _scrub(getattr(obj, f.name), values) for f in dataclasses.fields(obj)}
        return dataclasses.replace(obj, **changes)
    if isinstance(obj, tuple):
        return tuple(_scrub(x, values) for x in obj)
    if isinstance(obj, list):
        return [_scrub(x, values) for x in obj]
    if isinstance(obj, dict):
        return {_scrub(k, values): _scrub(v, values) for k, v in obj.items()}
    return obj


def scrub_file(path: Path, values: Sequence[str]) -> None:
    """Rewrite a file the trial owns (its server log) without the secrets."""
    if not values or not path.is_file():
        return
    data = path.read_bytes()
    clean = data
    for value in values:
        clean = clean.replace(value.encode(), MASK.encode())
    if clean != data:
        path.write_bytes(clean)
