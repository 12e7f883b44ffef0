"""The feasibility map's axes: whole-number ticks where a value only takes integers, a narrow range for a
fraction every point shares."""

from __future__ import annotations

from collections.abc import Sequence

from orchestrator.report.data import RunReadBack


def integer_ticks(rows: Sequence[RunReadBack], name: str) -> dict[str, object]:
    """Ticks at the values tried for a value that only takes integers (top-k 1.5 means nothing);
    nothing for a fraction, whose axis plotly ticks well by itself."""
    values = sorted({v for r in rows if (v := r.value(name)) is not None})
    if not values or any(v != int(v) for v in values):
        return {}
    if len(values) > 12:  # a wide range: plotly's own spacing, kept to whole numbers
        return {"tickformat": "d", "dtick": max(1, round((values[-1] - values[0]) / 8))}
    return {"tickmode": "array", "tickvals": [int(v) for v in values]}


def single_fraction_range(values: Sequence[float]) -> dict[str, object]:
    """A narrow range for a fraction every point of a panel shares (the trees all launched at one
    memory fraction): plotly ranges a single value +- 1, the point alone between 0 and 2."""
    distinct = set(values)
    if len(distinct) != 1 or (value := distinct.pop()) == int(value):
        return {}
    return {"range": [value - 0.02, value + 0.02]}
