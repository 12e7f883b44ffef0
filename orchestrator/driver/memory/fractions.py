"""The fractions (`--mem-fraction-static`) at which a launch starts, as ranges, and the smallest GPU that
starts it at a given fraction.

One floor and one ceiling do not describe them: SGLang captures the prefill CUDA graphs only when enough
is free after the set-up (`GraphCosts.prefill_min_free_gib`, 4 GiB on 0.5.17), so a raised fraction can
turn a launch that ran out of memory capturing them into one that skips them and starts. The fractions
that start are then two ranges, and the gap between them is where the prefill graphs are captured and do
not fit. Found on a grid and refined by bisection, with the prior's own arithmetic (`prior`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from itertools import pairwise

from orchestrator.driver.memory.facts import MemoryFacts
from orchestrator.driver.memory.prior import graph_need, graphs_fit, kv_tokens, room_after_pools
from orchestrator.records import ServerConfig

LOWEST, HIGHEST = 0.0001, 0.9999  # the fractions SGLang's flag takes, inside (0, 1)
GRID = 0.0025  # a range narrower than this may be missed; SGLang's own fractions are two decimals


@dataclass(frozen=True)
class FractionRange:
    low: float
    high: float

    def text(self) -> str:
        return f"{self.low:.4f}-{self.high:.4f}"

    def holds(self, f: float) -> bool:
        return self.low <= f <= self.high


def starts(facts: MemoryFacts, config: ServerConfig, f: float) -> bool:
    """Whether ``config`` at fraction ``f`` gets a KV pool and its CUDA graphs (the prior's walk)."""
    return kv_tokens(facts, config, f) > 0 and graphs_fit(facts, config, f)


def prefill_captured(facts: MemoryFacts, config: ServerConfig, f: float) -> bool:
    """Whether SGLang would capture the prefill graphs at ``f`` (enough free after the set-up)."""
    return graph_need(facts, config, room_after_pools(facts, config, f))[1]


def _edge(ok: Callable[[float], bool], inside: float, outside: float) -> float:
    """The last value from ``inside`` towards ``outside`` for which ``ok`` holds (bisection)."""
    for _ in range(30):
        mid = (inside + outside) / 2
        inside, outside = (mid, outside) if ok(mid) else (inside, mid)
    return inside


def fitting_ranges(facts: MemoryFacts, config: ServerConfig) -> tuple[FractionRange, ...]:
    """Every range of fractions in (0, 1) at which ``config`` starts, lowest first (none: no fraction)."""

    def ok(f: float) -> bool:
        return starts(facts, config, f)

    grid = [LOWEST + i * GRID for i in range(int((HIGHEST - LOWEST) / GRID) + 1)] + [HIGHEST]
    states = [ok(f) for f in grid]
    ranges: list[FractionRange] = []
    low: float | None = LOWEST if states[0] else None
    for (a, was), (b, now) in pairwise(zip(grid, states, strict=True)):
        if now and not was:
            low = _edge(ok, b, a)  # the lowest fraction that starts
        elif was and not now:
            assert low is not None
            ranges.append(FractionRange(low, _edge(ok, a, b)))
            low = None
    if low is not None:
        ranges.append(FractionRange(low, HIGHEST))
    return tuple(ranges)


def describe(facts: MemoryFacts, config: ServerConfig, ranges: tuple[FractionRange, ...]) -> str:
    """The ranges in words, and why there is a gap between two of them where the prefill gate makes one."""
    if not ranges:
        return "none"
    text = " and ".join(r.text() for r in ranges)
    notes = []
    for before, after in pairwise(ranges):
        gap = (before.high + after.low) / 2
        if prefill_captured(facts, config, gap) and not prefill_captured(facts, config, after.low):
            gate = facts.graphs.prefill_min_free_gib
            notes.append(
                f"between {before.high:.4f} and {after.low:.4f} SGLang captures the prefill CUDA graphs and "
                f"they do not fit; from {after.low:.4f} less than {gate:.1f} GiB is free after the set-up, "
                "so it skips them"
            )
    return text + (f" ({'; '.join(notes)})" if notes else "")


def smallest_gpu_mib(
    facts_for: Callable[[float], MemoryFacts], config: ServerConfig, above_mib: float, step_mib: float = 512
) -> float | None:
    """The smallest GPU (total MiB, in ``step_mib`` steps above ``above_mib``) on which ``config`` starts at
    its own fraction; None when none up to 32 times as large does. A scan, not a bisection: the prefill
    gate makes "starts" not monotonic in the GPU's size either."""
    f = config.mem_fraction_static
    mib = above_mib
    while mib < above_mib * 32:
        mib += step_mib
        if starts(facts_for(mib), config, f):
            return mib
    return None
