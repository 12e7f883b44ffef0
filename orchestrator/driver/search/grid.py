"""The values a searched field can take, so that advice names one the search can propose.

A diagnosis that said "lower cuda_graph_max_bs to 65" in a space of {64, 128, 256, 512} named a value
no trial of the study can launch with; advice is snapped to the field's grid (`spec.search.grid_values`),
toward safety.
"""

from __future__ import annotations

from orchestrator.spec.search import Choices, FloatRange, IntRange, grid_values

Dim = FloatRange | IntRange | Choices


def at_most(dim: Dim, value: float) -> float | None:
    """The largest value of the field not above `value` (None when even its smallest is above)."""
    values = grid_values(dim)
    if values is None:
        assert isinstance(dim, FloatRange)
        return min(value, dim.high) if value >= dim.low else None
    below = [v for v in values if v <= value + 1e-9]
    return below[-1] if below else None


def at_least(dim: Dim, value: float) -> float | None:
    """The smallest value of the field not below `value` (None when even its largest is below)."""
    values = grid_values(dim)
    if values is None:
        assert isinstance(dim, FloatRange)
        return max(value, dim.low) if value <= dim.high else None
    above = [v for v in values if v >= value - 1e-9]
    return above[0] if above else None


def above(dim: Dim, value: float) -> float | None:
    """The smallest value of the field strictly above `value`."""
    values = grid_values(dim)
    if values is None:
        return at_least(dim, value)
    higher = [v for v in values if v > value + 1e-9]
    return higher[0] if higher else None
