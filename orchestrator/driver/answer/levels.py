"""Speculation against the server without it, one concurrency level at a time.

A draft step and a verify pass cost more as the batch grows, so speculation can pay at light load and lose
at heavy load (public measurements show it losing at every batch size up to 32 on a real MoE model). Each
benchmark stage measures one concurrency level (`records.StageMetrics`), so the best speculative
configuration and the baseline are compared level by level, with the noise their overall comparison used
(`choose.NospecComparison`). When speculation pays at the light levels and loses at the heavy ones, the
recommendation is a runtime policy that serves both: speculation off above the last level where it pays,
as SGLang's adaptive speculation (`orchestrator.config.adaptive`: a bucket whose only candidate is 0 steps
does not speculate) where it applies (top-k 1, SGLang 0.5.17 on), else by routing the heavy load to a server
without speculation.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict

from orchestrator.config.adaptive import CONFIG_FILE
from orchestrator.driver.answer.choose import NospecComparison, clearly_ahead, lead, percent
from orchestrator.driver.answer.groups import Group
from orchestrator.records import ServerConfig, TrialRecord


class LevelCall(StrEnum):
    PAYS = "speculation pays"
    LOSES = "speculation loses"
    TOO_CLOSE = "too close to call"


class LevelComparison(BaseModel):
    """One concurrency level: the best speculative configuration's figure there against the baseline's."""

    model_config = ConfigDict(frozen=True)

    concurrency: int
    speculative_tok_per_s: float  # the median over its launches' stages at this level
    baseline_tok_per_s: float
    gap: float  # speculative over baseline, minus 1
    noise: float  # the gap noise alone opens at 95 % with these launch counts
    call: LevelCall

    def describe(self) -> str:
        sign = "+" if self.gap >= 0 else ""
        return (
            f"{self.concurrency} concurrent: {self.speculative_tok_per_s:.1f} against "
            f"{self.baseline_tok_per_s:.1f} tok/s ({sign}{percent(self.gap)}, noise up to "
            f"{percent(self.noise)}): {self.call.value}"
        )


def _at(records: Sequence[TrialRecord], group: Group, concurrency: int) -> float | None:
    by_number = {r.number: r for r in records}
    values = [
        s.output_tok_per_s
        for n in group.numbers
        if n in by_number
        for s in by_number[n].result.stages
        if s.concurrency == concurrency and s.completed > 0
    ]
    return statistics.median(values) if values else None


def level_calls(records: Sequence[TrialRecord], comparison: NospecComparison) -> list[LevelComparison]:
    """Every level both measured, light to heavy."""
    spec, base, noise = comparison.speculative, comparison.baseline, comparison.noise
    limit = noise.gap_noise(len(spec.numbers), len(base.numbers))
    both = {*spec.numbers, *base.numbers}
    levels = sorted({s.concurrency for r in records if r.number in both for s in r.result.stages})
    out = []
    for concurrency in levels:
        a, b = _at(records, spec, concurrency), _at(records, base, concurrency)
        if a is None or b is None or b <= 0:
            continue
        # The verdict's own test, from either side.
        call = LevelCall.TOO_CLOSE
        if clearly_ahead(a, b, limit):
            call = LevelCall.PAYS
        elif clearly_ahead(b, a, limit):
            call = LevelCall.LOSES
        out.append(
            LevelComparison(
                concurrency=concurrency,
                speculative_tok_per_s=a,
                baseline_tok_per_s=b,
                gap=lead(a, b),
                noise=limit,
                call=call,
            )
        )
    return out


class Split(BaseModel):
    """Speculation pays at some levels and loses at others: where, and the policy that serves both."""

    model_config = ConfigDict(frozen=True)

    pays: list[int]  # the levels where it pays
    loses: list[int]  # the levels where it loses
    statement: str
    runtime_policy: dict[str, Any] = {}


def split_of(levels: Sequence[LevelComparison], config: ServerConfig) -> Split | None:
    """None unless speculation (``config``, the best speculative configuration) pays at a level and loses at
    another, both beyond the noise."""
    pays = [lv.concurrency for lv in levels if lv.call is LevelCall.PAYS]
    loses = [lv.concurrency for lv in levels if lv.call is LevelCall.LOSES]
    if not pays or not loses:
        return None
    figures = "; ".join(lv.describe() for lv in levels)
    if max(pays) >= min(loses):
        return Split(
            pays=pays,
            loses=loses,
            statement=(
                f"speculation ({config.label()}) pays at concurrency {_levels(pays)} and loses at "
                f"{_levels(loses)}, with no one level above which it stops paying: {figures}"
            ),
        )
    last, off = max(pays), min(loses)
    policy: dict[str, Any] = {
        "speculation": "by concurrency",
        "speculate_up_to": last,
        "off_from": off,
        "measured": False,
    }
    if config.speculative_eagle_topk == 1 and config.speculative_num_steps:
        # A batch uses the bucket of the largest key not above it: from `off` on, the only tier is 0 steps.
        still = {"up_hysteresis": 0.0, "down_hysteresis": 0.0}
        policy["suggested_adaptive_config"] = {
            "1": {"candidate_steps": [config.speculative_num_steps], **still},
            str(off): {"candidate_steps": [0], **still},
        }
        how = (
            f"SGLang's adaptive speculation (speculative_adaptive with these tiers as its config file, "
            f"{CONFIG_FILE}: {config.speculative_num_steps} steps below "
            f"{off} running requests, none from {off}; not measured: a sweep with 'tiers' in "
            f"search.speculative_adaptive measures adaptive speculation)"
        )
    else:
        how = (
            f"SGLang's adaptive speculation takes top-k 1 only, so route loads of {off} concurrent requests "
            f"and more to a server without speculation"
        )
    policy["how"] = how
    statement = (
        f"speculation ({config.label()}) pays up to concurrency {last} and loses from {off} on: {figures}; "
        f"to serve both, speculate up to {last} and not from {off}: {how}"
    )
    return Split(pays=pays, loses=loses, statement=statement, runtime_policy=policy)


def _levels(values: Sequence[int]) -> str:
    return ", ".join(map(str, values))
