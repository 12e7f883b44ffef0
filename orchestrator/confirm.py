"""Confirmation: launch the top configurations again and name the winner by the median of its launches.

One launch cannot separate configurations closer than about 10 %: two starts of the same configuration
differ by several percent. So the end of a sweep spends a reserved share of its budget on more launches
of its best few configurations, ranks them by the median of their launches (one lucky draw no longer
wins) and says how sure it is: the 95 % interval of each configuration's launches, and which
configurations the winner cannot be told apart from.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

import optuna

from orchestrator.bench.steady import t975
from orchestrator.driver.attrs import TrialAttr
from orchestrator.mlflow_schema import Tag, TrialRecord
from orchestrator.records import ServerConfig, TrialStatus
from orchestrator.spec import BudgetSpec


@dataclass(frozen=True)
class Ranked:
    """One configuration and what its launches measured."""

    config: ServerConfig
    numbers: tuple[int, ...]  # the trials that launched it and measured a value, in order
    values: tuple[float, ...]  # their objectives, same order
    median: float
    ci95: tuple[float, float]

    @property
    def repeats(self) -> int:
        return len(self.values)

    @property
    def first(self) -> int:
        return self.numbers[0]

    @property
    def representative(self) -> int:
        """The launch whose value is the median (the lower middle one for an even count)."""
        order = sorted(range(len(self.values)), key=lambda i: self.values[i])
        return self.numbers[order[(len(order) - 1) // 2]]

    def overlaps(self, other: Ranked) -> bool:
        return self.ci95[0] <= other.ci95[1] and other.ci95[0] <= self.ci95[1]


def reserved_launches(budget: BudgetSpec, n_trials: int) -> int:
    """Launches kept back from the search for confirmation: ``confirm_top x (confirm_repeats - 1)``
    (each top configuration has one launch from the search), or none when that is more than half the
    budget (a sweep too small to confirm is better spent searching; ``confirmation_note`` says so)."""
    want = budget.confirm_top * (budget.confirm_repeats - 1)
    return want if 0 < want <= n_trials // 2 else 0


def confirmation_note(budget: BudgetSpec, n_trials: int) -> str:
    """Why a sweep runs no confirmation although its spec asks for one ('' when it runs, or is off)."""
    want = budget.confirm_top * (budget.confirm_repeats - 1)
    if want == 0 or reserved_launches(budget, n_trials):
        return ""
    return (
        f"no confirmation launches: {n_trials} trial(s) cannot spare {want} "
        f"(budget.confirm_top {budget.confirm_top} x (budget.confirm_repeats {budget.confirm_repeats} - 1)) "
        f"and keep half for the search; raise budget.trials to {2 * want} or lower budget.confirm_top"
    )


@dataclass(frozen=True)
class Spread:
    """Launch-to-launch spread pooled over every configuration launched more than once: relative
    standard deviation and its degrees of freedom. The spread is the machine's (its per-launch offset and
    drift), not one configuration's, so pooling gives one with three launches a usable interval and one
    launched once an honest one."""

    relative_sd: float
    dof: int


def pooled_spread(groups: Sequence[Sequence[float]]) -> Spread | None:
    """The pooled relative spread of the groups with two values or more (None without any)."""
    num, dof = 0.0, 0
    for values in groups:
        if len(values) < 2:
            continue
        mean = statistics.fmean(values)
        if mean <= 0:
            continue
        num += (len(values) - 1) * (statistics.stdev(values) / mean) ** 2
        dof += len(values) - 1
    return Spread(math.sqrt(num / dof), dof) if dof else None


def launch_interval(
    values: Sequence[float], stage_ci: tuple[float, float] | None = None, spread: Spread | None = None
) -> tuple[float, float]:
    """95 % interval of a configuration's throughput from its launches (Student t on their mean).

    With a pooled ``spread`` the launches' own standard deviation is replaced by it. Without one, a single
    launch has no launch-to-launch spread to go on: the stage's own interval (which misses the per-launch
    offset, so it is too narrow) or, without that, the point itself.
    """
    if not values:
        raise ValueError("no launch values")
    mean = statistics.fmean(values)
    if spread is not None:
        half = t975(spread.dof) * spread.relative_sd * mean / math.sqrt(len(values))
        return (mean - half, mean + half)
    if len(values) == 1:
        return stage_ci if stage_ci is not None else (values[0], values[0])
    half = t975(len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))
    return (mean - half, mean + half)


def _measured(records: Sequence[TrialRecord]) -> list[TrialRecord]:
    """Launches that measured a value the ranking can use: ok, not pruned, within the latency limits."""
    return [
        r
        for r in records
        if r.result.status is TrialStatus.OK
        and r.objective is not None
        and r.tag(Tag.PRUNED_AT_STAGE) is None
    ]


def candidates(records: Sequence[TrialRecord], lossy: Collection[int] = ()) -> list[TrialRecord]:
    """The launches that can be the answer: the baseline is the reference, never the recommendation, and
    a draft that changed the greedy output is never recommended. Confirmation and the verdict use these."""
    return [r for r in records if not r.baseline and r.number not in lossy]


def rank(records: Sequence[TrialRecord]) -> list[Ranked]:
    """Every measured configuration, best median first (ties broken by more launches, then the first),
    each with its interval from the launch-to-launch spread pooled over all of them."""
    groups: dict[ServerConfig, list[TrialRecord]] = {}
    for r in sorted(_measured(records), key=lambda r: r.number):
        groups.setdefault(r.result.config, []).append(r)
    spread = pooled_spread([[float(r.objective or 0.0) for r in launches] for launches in groups.values()])
    ranked = []
    for config, launches in groups.items():
        values = tuple(float(r.objective or 0.0) for r in launches)
        stage_ci = None
        best = launches[0].result.best_stage
        if len(launches) == 1 and best is not None and best.output_tok_per_s == values[0]:
            stage_ci = best.output_tok_per_s_ci95
        ranked.append(
            Ranked(
                config=config,
                numbers=tuple(r.number for r in launches),
                values=values,
                median=statistics.median(values),
                ci95=launch_interval(values, stage_ci, spread),
            )
        )
    ranked.sort(key=lambda c: (-c.median, -c.repeats, c.first))
    return ranked


def to_confirm(records: Sequence[TrialRecord], budget: BudgetSpec) -> list[tuple[Ranked, int]]:
    """The top ``confirm_top`` configurations and how many more launches each needs to reach
    ``confirm_repeats`` (those already there are left out)."""
    out = []
    for c in rank(records)[: budget.confirm_top]:
        missing = budget.confirm_repeats - c.repeats
        if missing > 0:
            out.append((c, missing))
    return out


def enqueue(study: optuna.Study, records: Sequence[TrialRecord], budget: BudgetSpec, reserve: int) -> int:
    """Queue the confirmation launches (at most ``reserve``) of the top ``candidates``, each marked
    ``confirm_of`` the first trial of its configuration and asked with that trial's own params (under
    adaptive speculation the launch's steps lie outside the searched range); returns how many."""
    params = {t.number: t.params for t in study.get_trials(deepcopy=False)}
    enqueued = 0
    for ranked, missing in to_confirm(records, budget):
        attrs: dict[str, Any] = {TrialAttr.CONFIRM_OF: ranked.first}
        asked = params[ranked.first]  # every ranked launch is a trial of this study
        for _ in range(min(missing, reserve - enqueued)):
            study.enqueue_trial(dict(asked), user_attrs=attrs)
            enqueued += 1
    return enqueued


@dataclass(frozen=True)
class Verdict:
    """The winner, and how sure the sweep is of it."""

    winner: Ranked
    runner_up: Ranked | None
    tied_with: tuple[Ranked, ...]  # configurations whose intervals overlap the winner's

    @property
    def distinguishable(self) -> bool:
        return self.runner_up is None or not self.winner.overlaps(self.runner_up)

    def confidence(self) -> dict[str, Any]:
        """best.json's ``confidence`` block."""
        return {
            "ci95": [round(self.winner.ci95[0], 3), round(self.winner.ci95[1], 3)],
            "repeats": self.winner.repeats,
            "tied_with": [c.representative for c in self.tied_with],
            "median_tok_per_s": round(self.winner.median, 3),
            "launches": list(self.winner.numbers),
            "distinguishable_from_runner_up": self.distinguishable,
        }

    def summary(self) -> str:
        """One plain sentence for the console and the report."""
        w = self.winner
        head = (
            f"median of {w.repeats} launch(es) {w.median:.1f} tok/s, "
            f"95 % interval {w.ci95[0]:.1f}-{w.ci95[1]:.1f}"
        )
        if self.runner_up is None:
            return head + "; no other configuration completed"
        if self.distinguishable:
            return head + f"; faster than the runner-up (trial {self.runner_up.representative}) beyond noise"
        tied = ", ".join(str(c.representative) for c in self.tied_with)
        return (
            head + f"; NOT distinguishable from the runner-up (trial {self.runner_up.representative}): "
            f"the intervals overlap (tied with trial(s) {tied}); more launches would be needed to tell "
            "them apart"
        )


def verdict(records: Sequence[TrialRecord]) -> Verdict | None:
    ranked = rank(records)
    if not ranked:
        return None
    winner = ranked[0]
    tied = tuple(c for c in ranked[1:] if winner.overlaps(c))
    return Verdict(winner, ranked[1] if len(ranked) > 1 else None, tied)
