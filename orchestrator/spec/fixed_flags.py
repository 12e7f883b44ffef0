"""The spec's fixed server flags (`server.flags`), parsed once, when the spec is read.

The flags are passed to the server as given (`FixedFlags.argv`); everything the driver needs to know of
them (the memory prior's prefill graphs, KV dtype and chunk size, MLflow's one param per flag, the API
key the client sends) is read from that one parse, so that no other module walks an argument list. Which
flag carries which fact is the engine's (`spec.engine_space.FlagReading`, declared with the engine in
`spec.engine_catalog`): `read_facts` reads them in its spelling. A list that cannot be read as
`--flag [value]` words, or an engine's flag whose value cannot be read, is refused with the fix, before
any GPU is claimed.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache

from orchestrator.spec.engine_space import FlagReading


@dataclass(frozen=True)
class FixedFlag:
    """One flag as given: `--page-size 16` and `--page-size=16` are both ("--page-size", "16"); a flag
    with no value (`--trust-remote-code`) has value None."""

    name: str
    value: str | None = None


@dataclass(frozen=True)
class FixedFlags:
    """The spec's fixed flags: the argument list as given, and each flag with its value."""

    argv: tuple[str, ...] = ()
    options: tuple[FixedFlag, ...] = ()

    def __iter__(self) -> Iterator[str]:
        return iter(self.argv)

    def __len__(self) -> int:
        return len(self.argv)

    def value(self, name: str) -> str | None:
        """The value of the flag ``name`` (its first occurrence); None when absent or bare."""
        return next((o.value for o in self.options if o.name == name), None)

    def has(self, name: str) -> bool:
        return any(o.name == name for o in self.options)


def parse_fixed(flags: Sequence[str]) -> FixedFlags:
    """``flags`` read once; a ValueError says which word cannot be read and how to write it."""
    return _parse(tuple(flags))


@lru_cache(maxsize=256)
def _parse(argv: tuple[str, ...]) -> FixedFlags:
    # Cached on the words: a spec's sections are copied (never changed) after load, and each copy reads the
    # same flags; parsing again would be the same answer.
    return FixedFlags(argv=argv, options=_options(argv))


@dataclass(frozen=True)
class ServerFacts:
    """What the driver reads typed from the fixed flags, whatever the engine spells them."""

    chunked_prefill_size: int | None = None  # None: the server's default (a value of 0 or below says so)
    prefill_graphs: bool = True  # False: the prefill CUDA graphs (or every graph) are turned off
    kv_cache_dtype: str | None = None  # None: the model's own dtype
    api_key: str | None = None


def read_facts(fixed: FixedFlags, reading: FlagReading) -> ServerFacts:
    """The facts ``reading`` names, read from ``fixed``; a ValueError says which flag and how to write it."""
    for name in (reading.chunked_prefill_size, reading.kv_cache_dtype, reading.api_key):
        if name is not None and fixed.has(name) and fixed.value(name) is None:
            raise ValueError(f"{name} has no value; write it as [{name!r}, VALUE]")
    size = None
    if reading.chunked_prefill_size is not None:
        chunk = fixed.value(reading.chunked_prefill_size)
        if chunk is not None and not chunk.lstrip("-").isdigit():
            raise ValueError(
                f"{reading.chunked_prefill_size} {chunk!r} is not an integer; give a token count, e.g. 8192"
            )
        size = int(chunk) if chunk is not None and int(chunk) > 0 else None
    off = any(
        fixed.has(name) if value is None else fixed.value(name) == value
        for name, value in reading.prefill_graphs_off
    )
    return ServerFacts(
        chunked_prefill_size=size,
        prefill_graphs=not off,
        kv_cache_dtype=fixed.value(reading.kv_cache_dtype) if reading.kv_cache_dtype else None,
        api_key=fixed.value(reading.api_key) if reading.api_key else None,
    )


def _options(argv: tuple[str, ...]) -> tuple[FixedFlag, ...]:
    """`--flag value`, `--flag=value` and bare `--flag` words; a value that follows no flag is refused (it
    would reach the server as a positional argument, which no server takes)."""
    options: list[FixedFlag] = []
    i = 0
    while i < len(argv):
        word = argv[i]
        if not word.startswith("--") or word == "--":
            raise ValueError(
                f"{word!r} follows no flag; each value goes right after its --flag, e.g. "
                '["--page-size", "16"]'
            )
        name, eq, value = word.partition("=")
        if eq:
            options.append(FixedFlag(name, value))
        elif i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            options.append(FixedFlag(name, argv[i + 1]))
            i += 1
        else:
            options.append(FixedFlag(name))
        i += 1
    return tuple(options)
