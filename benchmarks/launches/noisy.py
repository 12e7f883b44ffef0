"""Measurement noise as a real node has it, and the paid, budgeted launches every strategy goes through.

The oracle gives each configuration's noise-free stages. A *launch* draws what a real one would measure.
How much that moves depends on what bounds a decode step (`driver.answer.noise.Regime`; the figures are
the H200 measurements of SGLang 0.5.17 kept with the project's reference notes on noise):

- **GPU-bound** (a Llama-3-8B-shaped model, real compute): three launches of one configuration differ by
  0.3 % (EAGLE-3) to 0.7 % (no speculation), so every launch multiplies all of its stages by one
  log-normal factor of 0.5 % standard deviation; the stages of one launch move by about 1 % (±0.5-1 %
  measured), a flat 1 % per stage.
- **Overhead-bound** (the tiny test models): two starts of the same configuration differ by 6-9 % even
  with 12 s stages (a 7 % log-normal launch factor), and a stage's own noise falls with its length: about
  ±15 % for a sub-second stage, 2-10 % for a 12 s one (standard deviation 15 % at 0.3 s falling as
  1/sqrt(duration) towards a 2 % floor).

Draws are seeded by (seed, configuration, how many times this run has launched it), so every strategy
that launches a configuration for the k-th time in seed s sees the same figure: common random numbers,
the differences between strategies are their decisions, not their luck.

`Launcher` is the one way to spend GPU time: every launch is paid in full (start-up from the profile,
an OOM up to its failure, the stages that ran, the stop) times the node's GPUs, a repeat is a launch like
any other, and it records after each launch what the strategy would recommend at that moment.
"""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from benchmarks.truth.oracle import Evaluation, Oracle
from orchestrator.driver.answer.noise import Regime
from orchestrator.records import ServerConfig, TrialStatus

LAUNCH_SD = 0.07  # overhead-bound per-launch offset: two starts differ by 6-9 %
SHORT_STAGE_SD = 0.15  # a 0.3 s stage moves about ±15 % between repeats
SHORT_STAGE_S = 0.3
STAGE_FLOOR_SD = 0.02  # a long stage still moves a little within one server
GPU_LAUNCH_SD = 0.005  # GPU-bound: three 8B launches differ by 0.3-0.7 %
GPU_STAGE_SD = 0.01  # GPU-bound: the stages of one 8B launch move by about 1 %


def stage_sd(duration_s: float) -> float:
    """Overhead-bound: relative standard deviation of one stage's tok/s on one server, by its length."""
    shrink = min(1.0, math.sqrt(SHORT_STAGE_S / max(duration_s, 1e-6)))
    return STAGE_FLOOR_SD + (SHORT_STAGE_SD - STAGE_FLOOR_SD) * shrink


@dataclass(frozen=True)
class Spread:
    """A regime's noise: the launch-to-launch factor and each stage's own spread."""

    launch_sd: float
    stage_sd: Callable[[float], float]  # by the stage's duration in seconds


SPREADS: dict[Regime, Spread] = {
    Regime.GPU_BOUND: Spread(GPU_LAUNCH_SD, lambda _duration_s: GPU_STAGE_SD),
    Regime.OVERHEAD_BOUND: Spread(LAUNCH_SD, stage_sd),
}


def _rng(seed: int, config: ServerConfig, k: int) -> random.Random:
    key = f"{seed}|{config.label()}|{k}".encode()
    return random.Random(int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big"))


def noisy(
    ev: Evaluation,
    seed: int,
    k: int,
    *,
    launch_sd: float | None = None,
    regime: Regime = Regime.OVERHEAD_BOUND,
) -> Evaluation:
    """The k-th launch (from 0) of `ev`'s configuration in run `seed`, as a real node in `regime` would
    measure it (`launch_sd` overrides the regime's launch-to-launch figure)."""
    if not ev.stages:
        return ev  # a failed start-up measures nothing; it fails the same way every time
    spread = SPREADS[regime]
    rng = _rng(seed, ev.config, k)
    offset = math.exp(rng.gauss(0.0, spread.launch_sd if launch_sd is None else launch_sd))
    stages = tuple(
        replace(
            s,
            output_tok_per_s=s.output_tok_per_s
            * offset
            * math.exp(rng.gauss(0.0, spread.stage_sd(s.duration_s))),
        )
        for s in ev.stages
    )
    return replace(ev, stages=stages)


@dataclass(frozen=True)
class Launch:
    """One server launch a strategy paid for, and what the strategy recommended once it was done."""

    config: ServerConfig
    status: TrialStatus
    objective: float | None  # the measured value the strategy learned (None: failed, or pruned)
    gpu_s: float  # node seconds x GPUs
    failed_at: str = ""  # the failure stage of an infeasible launch
    recommend: ServerConfig | None = None  # the strategy's answer after this launch


Rule = Callable[[Sequence[Launch]], ServerConfig | None]


def best_draw(launches: Sequence[Launch]) -> ServerConfig | None:
    """The usual rule: the configuration of the single best measurement so far (first of equals)."""
    best: Launch | None = None
    for lc in launches:
        if lc.objective is not None and (best is None or lc.objective > (best.objective or 0.0)):
            best = lc
    return best.config if best is not None else None


@dataclass
class Launcher:
    """Launches for one strategy in one seed, within a GPU-hour budget (and a launch cap)."""

    oracle: Oracle
    seed: int
    budget_gpu_s: float
    max_launches: int
    regime: Regime = Regime.OVERHEAD_BOUND
    launch_sd: float | None = None  # None: the regime's figure
    rule: Rule = best_draw
    launches: list[Launch] = field(default_factory=list)
    spent_s: float = 0.0
    _count: dict[ServerConfig, int] = field(default_factory=dict)

    @property
    def exhausted(self) -> bool:
        return self.spent_s >= self.budget_gpu_s or len(self.launches) >= self.max_launches

    def measure(self, config: ServerConfig) -> Evaluation:
        """Draw this configuration's next launch (not yet paid: `pay` does that once it is over)."""
        k = self._count.get(config, 0)
        self._count[config] = k + 1
        return noisy(self.oracle.evaluate(config), self.seed, k, launch_sd=self.launch_sd, regime=self.regime)

    def pay(self, ev: Evaluation, *, stages_run: int | None = None, objective: float | None = None) -> Launch:
        """Pay for a launch that ran `stages_run` stages (all by default) and record it."""
        gpu_s = ev.seconds(stages_run) * self.oracle.gpus
        self.spent_s += gpu_s
        stage = ev.failure.stage.value if ev.failure is not None and ev.status.infeasible else ""
        lc = Launch(ev.config, ev.status, objective, gpu_s, stage)
        lc = replace(lc, recommend=self.rule([*self.launches, lc]))
        self.launches.append(lc)
        return lc

    def launch(self, config: ServerConfig) -> Launch:
        """Launch, run every stage, pay; the measured value is the best stage, as the product scores it."""
        ev = self.measure(config)
        return self.pay(ev, objective=ev.objective)

    def launches_of(self, config: ServerConfig) -> int:
        return self._count.get(config, 0)
