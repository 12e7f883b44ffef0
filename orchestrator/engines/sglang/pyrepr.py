"""Reads Python reprs as SGLang prints its resolved arguments: `ServerArgs(k=v, ...)` or `{'k': v, ...}`.

The line runs to tens of kilobytes with nested dataclasses, dicts, lists and quoted strings that hold
commas and brackets, so it is split by a small scanner rather than a regular expression; values stay as
printed and are typed only where the caller asks.
"""

from __future__ import annotations

import ast
import re

_OPEN, _CLOSE = "([{", ")]}"


def _scan(text: str, start: int) -> tuple[list[str], int]:
    """Split ``text[start:]`` on commas outside brackets and quotes, up to the bracket that closes.

    Returns the pieces and the index just past the closing bracket (or the end of a truncated line).
    """
    pieces: list[str] = []
    depth, quote, i, piece_start = 0, "", start, start
    while i < len(text):
        c = text[i]
        if quote:
            if c == "\\":
                i += 1
            elif c == quote:
                quote = ""
        elif c in "'\"":
            quote = c
        elif c in _OPEN:
            depth += 1
        elif c in _CLOSE:
            if depth == 0:
                pieces.append(text[piece_start:i])
                return pieces, i + 1
            depth -= 1
        elif c == "," and depth == 0:
            pieces.append(text[piece_start:i])
            piece_start = i + 1
        i += 1
    pieces.append(text[piece_start:])
    return pieces, len(text)


_CALL_OPEN = re.compile(r"^\s*(?:[\w.]*\(|\{)")
_DICT_KEY = re.compile(r"""^\s*(['"])(?P<key>.*?)\1\s*:\s*(?P<value>.*)$""", re.DOTALL)
_KWARG = re.compile(r"^\s*(?P<key>\w+)=(?P<value>.*)$", re.DOTALL)


def parse_mapping(text: str) -> dict[str, str]:
    """Top-level items of a dataclass repr ``Name(k=v, ...)`` or a dict repr ``{'k': v, ...}``.

    Values stay as printed (nested reprs, lists and quoted strings included); an unknown shape gives {}.
    """
    opened = _CALL_OPEN.match(text)
    if not opened:
        return {}
    pieces, _ = _scan(text, opened.end())
    out: dict[str, str] = {}
    for piece in pieces:
        m = _KWARG.match(piece) or _DICT_KEY.match(piece)
        if m:
            out[m.group("key")] = m.group("value").strip()
    return out


def literal(value: str | None) -> object:
    if value is None:
        return None
    try:
        return ast.literal_eval(value)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return value


def as_int(value: str | None) -> int | None:
    v = literal(value)
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def as_float(value: str | None) -> float | None:
    v = literal(value)
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def as_str(value: str | None) -> str | None:
    v = literal(value)
    return v if isinstance(v, str) else None


def as_bool(value: str | None) -> bool | None:
    v = literal(value)
    return v if isinstance(v, bool) else None


def ints(text: str | None) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", text or ""))


def parse_server_args(line: str) -> dict[str, str]:
    """The key/values of a `server_args=ServerArgs(...)` (<= 0.5.19) or `server_args={...}` (0.5.23) line."""
    at = line.find("server_args=")
    return parse_mapping(line[at + len("server_args=") :]) if at >= 0 else {}


def decode_graph_config(raw: dict[str, str]) -> dict[str, str]:
    """The decode phase of `cuda_graph_config` (0.5.14+), where max_bs and bs live."""
    return parse_mapping(parse_mapping(raw.get("cuda_graph_config", "")).get("decode", ""))
