"""What an engine can be searched in: its fields, each with its kind, its flag and its bounds.

An engine declares its space with its name and owned flags (`spec.engine_catalog.declare`, which
`engines.register` calls), so the spec checks a search block against it before any engine's code loads:
a field searched over several values that the engine has no flag for would launch the same server under
different names, and its measurements would be noise. Whether the memory prior applies is the space's
too: the prior is fitted on SGLang's accounting and defaults, and an engine without them is searched
from launches alone. So are the engine's rules of which configurations it serves as one server
(`SameServer`: SGLang captures graphs up to its request pool, so a graph batch above it is that pool's
server): the driver measures each server once, whatever names its draws give it. And so are the values
the engine launches at whatever its flags ask (`Forced`: SGLang's EAGLE drafts steps + 1 tokens under
top-k 1), applied as a configuration is built, so that it records what runs. A leaf: it imports nothing
of the package.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum


class FieldKind(StrEnum):
    INT = "int"
    FLOAT = "float"
    CHOICE = "choice"


@dataclass(frozen=True)
class SpaceField:
    """One searched value of an engine: its name (the spec's key, the configuration's field), its kind,
    the flag that sets it (its newest spelling) and, where the engine bounds it, its bounds or choices."""

    name: str
    kind: FieldKind
    flag: str
    low: float | None = None
    high: float | None = None
    choices: tuple[str, ...] = ()


class RuleKind(StrEnum):
    CAPPED = "capped"  # a value above another field's is served at that field's value
    STEPPED = "stepped"  # a value is served at the multiple of a step at or below it


@dataclass(frozen=True)
class SameServer:
    """One rule of an engine's: which configurations it serves as one server, so that a launch of one
    measures them all (`config.served.served_as`). CAPPED: `name` at or above the value of the field `at`
    is served at that value, where that value is one of `where_at` (empty: whatever it is). STEPPED:
    `name` is served at the multiple of `step` at or below it."""

    name: str
    kind: RuleKind
    at: str = ""
    step: float = 0.0
    where_at: tuple[float, ...] = ()


@dataclass(frozen=True)
class Forced:
    """One rule of an engine's: a value it launches at whatever its flag asks (`config.served.launched_as`,
    which `spec.search.make_config` applies, so the configuration is what runs). Where the field `when`
    is `equals`, `name` runs at the value of the field `base` plus `plus`. Unlike `SameServer`, which
    only keys a measurement, it changes the configuration itself."""

    name: str
    base: str
    plus: float
    when: str
    equals: float


@dataclass(frozen=True)
class FlagReading:
    """Which of an engine's own flags carry what the driver reads typed from the spec's fixed flags
    (`spec.fixed_flags.read_facts`), in the engine's spelling; None (or no pair): the engine has no such
    flag, and the fact keeps its default."""

    chunked_prefill_size: str | None = None  # an integer of prompt tokens a prefill takes at most
    kv_cache_dtype: str | None = None
    api_key: str | None = None  # the key the benchmark client must send
    prefill_graphs_off: tuple[tuple[str, str | None], ...] = ()  # (flag, value; None: the bare flag)


@dataclass(frozen=True)
class EngineSpace:
    """An engine's searched fields, whether the memory prior knows its accounting (`memory_defaults`:
    its graph and scheduler defaults are the prior's, `footprint/sglang_defaults.py`), its rules of
    which configurations are one server (`same_server`) and the values it sets itself (`forced`)."""

    fields: tuple[SpaceField, ...]
    memory_defaults: bool = False
    same_server: tuple[SameServer, ...] = ()
    forced: tuple[Forced, ...] = ()

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields)

    def field(self, name: str) -> SpaceField | None:
        return next((f for f in self.fields if f.name == name), None)

    def unknown(self, searched: Iterable[str]) -> list[str]:
        """The names of ``searched`` this space has no field for, in their order."""
        return [name for name in searched if self.field(name) is None]
