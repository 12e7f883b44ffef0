"""What ``workload.dataset`` names: ``random``, ``generated-chat``, ``sharegpt: PATH`` or ``jsonl: PATH``.

A leaf beside the spec, which checks each entry with `parse_ref` and makes its file absolute with
`resolve_source`; the benchmark client (`bench.textdata`) reads the files they name.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path


class DatasetKind(StrEnum):
    RANDOM = "random"
    GENERATED_CHAT = "generated-chat"
    SHAREGPT = "sharegpt"
    JSONL = "jsonl"

    @property
    def has_file(self) -> bool:
        return self in (DatasetKind.SHAREGPT, DatasetKind.JSONL)


@dataclass(frozen=True)
class DatasetRef:
    """One parsed ``workload.dataset`` entry."""

    kind: DatasetKind
    path: str = ""

    @property
    def name(self) -> str:
        """Short name for metrics and MLflow keys: the kind, or the file's stem."""
        return f"{self.kind.value}:{Path(self.path).stem}" if self.path else self.kind.value

    def __str__(self) -> str:
        return f"{self.kind.value}: {self.path}" if self.path else self.kind.value


def parse_ref(text: str) -> DatasetRef:
    """``random`` / ``generated-chat`` / ``sharegpt: PATH`` / ``jsonl: PATH``; ValueError with the fix."""
    kind_text, colon, path = text.partition(":")
    kind_text, path = kind_text.strip(), path.strip()
    try:
        kind = DatasetKind(kind_text)
    except ValueError:
        raise ValueError(
            f"unknown dataset {text!r}: use random, generated-chat, 'sharegpt: PATH' or 'jsonl: PATH'"
        ) from None
    if kind.has_file and not path:
        raise ValueError(f"{kind.value} needs a file: write '{kind.value}: PATH'")
    if not kind.has_file and colon:
        raise ValueError(f"{kind.value} takes no file; write just '{kind.value}'")
    return DatasetRef(kind, path)


def resolve_source(source: str, base: Path) -> str:
    """A dataset entry with its file made absolute against ``base`` (the spec's folder)."""
    ref = parse_ref(source)
    return f"{ref.kind.value}: {(base / ref.path).resolve()}" if ref.path else source


@dataclass(frozen=True)
class DatasetCounts:
    """What one dataset gives each benchmark stage: its requests, and for conversations (a file or the
    built-in chat) how many were kept and how many left out, by reason. The console prints it as
    `dataset NAME: 16 requests from 68 conversations, 1 skipped (1 empty conversation)`; the parent MLflow
    run keeps it as params, and the report shows it."""

    key: str  # the name in an MLflow key (`bench.traffic.metric_name`)
    line: str  # the console's line, word for word
    requests: int
    conversations: int | None = None  # None for random token ids
    skipped: tuple[tuple[str, int], ...] = ()  # (reason, count), most frequent first

    @property
    def skipped_total(self) -> int:
        return sum(n for _, n in self.skipped)
