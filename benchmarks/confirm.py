"""The confirmation rule: relaunch the top candidates and rank them by the median of their launches.

One launch cannot separate configurations closer than the launch-to-launch spread (6-9 % on an H200), so
the best single draw is usually a lucky one. The rule the product is adopting for the end of a sweep:
take the top `top` configurations by their measurements, launch each again until it has `repeats`
launches in all, and recommend the one with the highest median. The product has no confirmation phase
yet; until it has, this module is the rule, applied after `Sweep.run` on the sweep's own launches.

Two levers on top of it, measured by the benchmark:

- `pool="tree"`: rank speculative trees (steps, top-k, draft tokens) instead of single configurations,
  pooling every launch of the tree whatever its memory flags. Among configurations that start and serve,
  the memory flags barely move the speed (on every benchmark profile the median configuration of a tree
  is within 1 % of the tree's best), so a sweep that tried one tree under several memory settings has in
  effect measured it several times; pooling uses those launches instead of paying for new ones. The
  candidate relaunched for a tree is its best-measured configuration, and that is what is recommended.
- `spread`: a candidate further than `spread` below the leader is not worth relaunching (its interval
  does not overlap the leader's), so the launches go only where the intervals overlap.
- `race`: successive halving instead of a fixed number of repeats: every surviving candidate gets one
  more launch per round and the one with the lowest mean drops out, until one is left or the budget is
  spent; the answer is the best mean. It spends the reserve where the race is still close.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from benchmarks.noise import Launch, Launcher
from orchestrator.records import ServerConfig

Key = tuple[object, ...]


@dataclass(frozen=True)
class ConfirmRule:
    top: int = 3
    repeats: int = 3
    spread: float | None = None  # None: confirm the top `top` whatever their distance to the leader
    pool: Literal["config", "tree"] = "config"
    race: bool = False

    def key(self, config: ServerConfig) -> Key:
        if self.pool == "tree":
            c = config
            return (c.speculative_num_steps, c.speculative_eagle_topk, c.speculative_num_draft_tokens)
        return (config,)


def measured(launches: Sequence[Launch], rule: ConfirmRule | None = None) -> dict[Key, list[float]]:
    """Every full measurement per candidate (a configuration, or a tree), in launch order."""
    rule = rule or ConfirmRule()
    out: dict[Key, list[float]] = {}
    for lc in launches:
        if lc.objective is not None:
            out.setdefault(rule.key(lc.config), []).append(lc.objective)
    return out


def _representative(launches: Sequence[Launch], rule: ConfirmRule) -> dict[Key, ServerConfig]:
    """Each candidate's configuration to launch and recommend: its best single measurement."""
    best: dict[Key, tuple[float, ServerConfig]] = {}
    for lc in launches:
        if lc.objective is not None:
            k = rule.key(lc.config)
            if k not in best or lc.objective > best[k][0]:
                best[k] = (lc.objective, lc.config)
    return {k: c for k, (_, c) in best.items()}


def ranked(launches: Sequence[Launch], rule: ConfirmRule | None = None) -> list[tuple[ServerConfig, float]]:
    """Candidates by the median of their measurements, best first (stable for equals), each as the
    configuration that stands for it."""
    rule = rule or ConfirmRule()
    reps = _representative(launches, rule)
    medians = [(reps[k], statistics.median(v)) for k, v in measured(launches, rule).items()]
    return sorted(medians, key=lambda cv: -cv[1])


def confirm(launcher: Launcher, rule: ConfirmRule) -> list[ServerConfig]:
    """Relaunch the candidates round by round (so a budget that runs out still leaves every candidate
    with as many launches as possible) and switch the recommendation to the best median. Returns the
    candidates."""
    ranking = ranked(launcher.launches, rule)[: rule.top]
    if not ranking:
        return []
    lead = ranking[0][1]
    if rule.spread is not None:
        ranking = [(c, v) for c, v in ranking if v >= lead * (1.0 - rule.spread)]
    candidates = [c for c, _ in ranking]

    def best_median(launches: Sequence[Launch]) -> ServerConfig | None:
        values = measured(launches, rule)
        scored = [
            (statistics.median(values[rule.key(c)]), -i, c)
            for i, c in enumerate(candidates)
            if rule.key(c) in values
        ]
        return max(scored)[2] if scored else None

    launcher.rule = best_median
    if rule.race:
        _race(launcher, rule, candidates)
        return candidates
    for _ in range(rule.repeats):
        for config in candidates:
            if launcher.spent_s >= launcher.budget_gpu_s:
                return candidates
            if len(measured(launcher.launches, rule).get(rule.key(config), [])) < rule.repeats:
                launcher.launch(config)
    return candidates


def _race(launcher: Launcher, rule: ConfirmRule, candidates: list[ServerConfig]) -> None:
    alive = list(candidates)

    def mean_of(c: ServerConfig, launches: Sequence[Launch]) -> float:
        return statistics.fmean(measured(launches, rule).get(rule.key(c), [0.0]))

    def best_mean(launches: Sequence[Launch]) -> ServerConfig | None:
        return max(alive, key=lambda c: mean_of(c, launches)) if alive else None

    launcher.rule = best_mean
    while launcher.spent_s < launcher.budget_gpu_s:
        for config in list(alive):
            if launcher.spent_s >= launcher.budget_gpu_s:
                return
            launcher.launch(config)
        if len(alive) > 1:
            alive.remove(min(alive, key=lambda c: mean_of(c, launcher.launches)))
