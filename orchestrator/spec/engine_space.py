"""What an engine can be searched in: its fields, each with its kind, its flag and its bounds.

An engine declares its space with its name and owned flags (`spec.engine_catalog.declare`, which
`engines.register` calls), so the spec checks a search block against it before any engine's code loads:
a field searched over several values that the engine has no flag for would launch the same server under
different names, and its measurements would be noise. Whether the memory prior applies is the space's
too: the prior is fitted on SGLang's accounting and defaults, and an engine without them is searched
from launches alone. A leaf: it imports nothing of the package.
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
    """An engine's searched fields, and whether the memory prior knows its accounting (`memory_defaults`:
    its graph and scheduler defaults are the prior's, `footprint/sglang_defaults.py`)."""

    fields: tuple[SpaceField, ...]
    memory_defaults: bool = False

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields)

    def field(self, name: str) -> SpaceField | None:
        return next((f for f in self.fields if f.name == name), None)

    def unknown(self, searched: Iterable[str]) -> list[str]:
        """The names of ``searched`` this space has no field for, in their order."""
        return [name for name in searched if self.field(name) is None]
