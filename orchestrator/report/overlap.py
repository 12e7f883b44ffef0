"""Where the feasibility map draws a trial when several outcomes share one point of a panel.

Many trials share a pair of values (every tree of a sweep may launch at the same graph batch size and
running-request cap), and an OOM drawn over a trial that served at that point tells the reader the
values always run out of memory. So the outcomes at a point are set side by side along x, a small step
apart (the hover still names the true values), and each outcome's trials there are counted.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from orchestrator.report.data import Outcome

STEP_OF_SPAN = 0.04  # the step between outcomes at a point, as a share of the panel's x span
LEGEND_TITLE = (
    "Outcomes at one point are drawn side by side; a number over a marker counts the trials of that "
    "outcome there."
)

Point = tuple[float, float, Outcome]


def step(xs: Sequence[float]) -> float:
    """The step along x between two outcomes at one point: a share of the values' span; for a single
    value, a share of the narrow range the panel gives it (a fraction: +- 0.02; an integer: plotly's +- 1)."""
    if not xs:
        return 0.0
    span = max(xs) - min(xs)
    if span > 0:
        return STEP_OF_SPAN * span
    return 0.005 if any(x != int(x) for x in xs) else 0.15


def spread(points: Sequence[Point], dx: float) -> list[float]:
    """The x each point is drawn at: the outcomes at one (x, y) centred around x, in `Outcome` order."""
    present: dict[tuple[float, float], list[Outcome]] = {}
    for x, y, outcome in points:
        present.setdefault((x, y), [])
        if outcome not in present[(x, y)]:
            present[(x, y)].append(outcome)
    drawn = []
    for x, y, outcome in points:
        here = sorted(present[(x, y)], key=list(Outcome).index)
        drawn.append(x + (here.index(outcome) - (len(here) - 1) / 2) * dx)
    return drawn


def counts(points: Sequence[Point], drawn: Sequence[float]) -> list[tuple[float, float, Outcome, int]]:
    """(drawn x, y, outcome, n) for each outcome with more than one trial at a point."""
    n = Counter((x, y, o) for x, y, o in points)
    where = {(x, y, o): d for (x, y, o), d in zip(points, drawn, strict=True)}
    return [(where[k], k[1], k[2], c) for k, c in n.items() if c > 1]
