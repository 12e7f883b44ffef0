"""The one results table: rows of (benchmark, case, variant, metric, value, ratio to specsweep), plus notes.

Every benchmark returns rows in the same shape so the harness prints, stores and commits one table;
`ratio` is only set where the issue asks for a comparison with specsweep (the search benchmark).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class Row:
    bench: str
    case: str
    variant: str
    metric: str
    value: float | None  # None: not measured / not applicable; math.inf: not reached
    shown: str  # the value as the table prints it
    ratio: float | None = None  # value / specsweep's value, same case and metric

    def as_json(self) -> dict[str, Any]:
        out = asdict(self)
        for key in ("value", "ratio"):
            if isinstance(out[key], float) and not math.isfinite(out[key]):
                out[key] = None if math.isnan(out[key]) else "inf"
        return out


@dataclass
class Table:
    rows: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)

    def extend(self, rows: Sequence[Row], notes: Sequence[str] = ()) -> None:
        self.rows.extend(rows)
        self.notes.extend(notes)

    def as_json(self) -> dict[str, Any]:
        return {"meta": self.meta, "rows": [r.as_json() for r in self.rows], "notes": self.notes}

    def dumps(self) -> str:
        return json.dumps(self.as_json(), indent=1)

    def markdown(self) -> str:
        head = ["benchmark", "case", "variant", "metric", "value", "x specsweep"]
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for r in self.rows:
            cells = [r.bench, r.case, r.variant, r.metric, r.shown, fmt_ratio(r.ratio)]
            lines.append("| " + " | ".join(c.replace("|", "/") for c in cells) + " |")
        if self.notes:
            lines += ["", "Notes:", ""]
            lines += [f"{i}. {note}" for i, note in enumerate(self.notes, 1)]
        return "\n".join(lines) + "\n"

    def text(self) -> str:
        """A plain-text rendering for the terminal (same rows, aligned columns)."""
        head = ("benchmark", "case", "variant", "metric", "value", "x specsweep")
        body = [(r.bench, r.case, r.variant, r.metric, r.shown, fmt_ratio(r.ratio)) for r in self.rows]
        widths = [max(len(str(c)) for c in col) for col in zip(head, *body, strict=False)]
        out = ["  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)) for row in (head, *body)]
        out.insert(1, "  ".join("-" * w for w in widths))
        if self.notes:
            out += ["", "Notes:"] + [f"{i}. {note}" for i, note in enumerate(self.notes, 1)]
        return "\n".join(out) + "\n"


def fmt_ratio(ratio: float | None) -> str:
    if ratio is None or math.isnan(ratio):
        return "—"
    if math.isinf(ratio):
        return "∞"
    return f"{ratio:.2f}"


def ratio(value: float | None, base: float | None) -> float | None:
    """value / base; None when either is unknown or both are unbounded, inf when only value is."""
    if value is None or base is None:
        return None
    if math.isinf(base):
        return None
    if base == 0:
        return 1.0 if value == 0 else math.inf
    return value / base


def median(values: Sequence[float]) -> float:
    """Median that keeps `inf` (a censored run) as the largest value."""
    if not values:
        return math.nan
    ordered = sorted(values)
    mid = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[mid]
    low, high = ordered[mid - 1], ordered[mid]
    return math.inf if math.isinf(high) else (low + high) / 2


def quantile(values: Sequence[float], q: float) -> float:
    """Linear-interpolation quantile (numpy's default), for p95 of timings."""
    if not values:
        return math.nan
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    low = math.floor(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)
