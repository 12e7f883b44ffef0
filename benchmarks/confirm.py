"""The confirmation rule: relaunch the top candidates and rank them by the median of their launches.

One launch cannot separate configurations closer than the launch-to-launch spread (6-9 % on an H200), so
the best single draw is usually a lucky one. The rule the product is adopting for the end of a sweep:
take the top `top` configurations by their measurements, launch each again until it has `repeats`
launches in all, and recommend the one with the highest median. The product has no confirmation phase
yet; until it has, this module is the rule, applied after `Sweep.run` on the sweep's own launches.

`spread` is the multi-fidelity lever: a candidate whose first figure lies further than `spread` below the
leader's is not worth relaunching (its interval does not overlap the leader's), so the launches go only
where the intervals overlap.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from benchmarks.noise import Launch, Launcher
from orchestrator.records import ServerConfig


@dataclass(frozen=True)
class ConfirmRule:
    top: int = 3
    repeats: int = 3
    spread: float | None = None  # None: confirm the top `top` whatever their distance to the leader


def measured(launches: Sequence[Launch]) -> dict[ServerConfig, list[float]]:
    """Every full measurement per configuration, in launch order."""
    out: dict[ServerConfig, list[float]] = {}
    for lc in launches:
        if lc.objective is not None:
            out.setdefault(lc.config, []).append(lc.objective)
    return out


def ranked(launches: Sequence[Launch]) -> list[tuple[ServerConfig, float]]:
    """Configurations by the median of their measurements, best first (stable for equals)."""
    medians = [(c, statistics.median(v)) for c, v in measured(launches).items()]
    return sorted(medians, key=lambda cv: -cv[1])


def confirm(launcher: Launcher, rule: ConfirmRule) -> list[ServerConfig]:
    """Relaunch the candidates round by round (so a budget that runs out still leaves every candidate
    with as many launches as possible) and switch the recommendation to the best median. Returns the
    candidates."""
    ranking = ranked(launcher.launches)[: rule.top]
    if not ranking:
        return []
    lead = ranking[0][1]
    if rule.spread is not None:
        ranking = [(c, v) for c, v in ranking if v >= lead * (1.0 - rule.spread)]
    candidates = [c for c, _ in ranking]

    def best_median(launches: Sequence[Launch]) -> ServerConfig | None:
        values = measured(launches)
        scored = [(statistics.median(values[c]), -i, c) for i, c in enumerate(candidates) if c in values]
        return max(scored)[2] if scored else None

    launcher.rule = best_median
    for _ in range(rule.repeats):
        for config in candidates:
            if launcher.spent_s >= launcher.budget_gpu_s:
                return candidates
            if len(measured(launcher.launches).get(config, [])) < rule.repeats:
                launcher.launch(config)
    return candidates
