"""How much one launch's tok/s moves: calibrated from the study's own repeats, else a prior per regime.

Each launch of a configuration is a new draw: the server starts with its own offset (launch to launch)
and its stage measures a window of a drifting rate (within a launch). How big that is depends on what
bounds a decode step (reference measurements on an H200, SGLang 0.5.17):

- **GPU-bound** (an 8B-shaped model): three launches of one configuration differ by 0.3-0.7 %, the stages
  of one launch by about 1 %.
- **CPU-overhead-bound** (the tiny test models): two starts differ by 6-9 %, stages by about 8 %.

So the spread the verdict uses comes, in this order, from

1. the study's own repeated launches, pooled over every configuration launched more than once (the
   spread is the machine's, not one configuration's), once they give `MIN_POOLED_DOF` degrees of freedom;
2. until then a prior for the regime the launches measured: the launch-to-launch figure and the
   within-launch stage figure added in quadrature (independent parts of one launch's figure), widened to
   what a single repeat measured where it measured more. One degree of freedom is too few to replace a
   prior, but a repeat wider than it is the machine speaking: the real pair on an H100 launched one tree
   twice at 3272.1 and 2374.4 tok/s (22.5 %) while the verdict called a 44 % lead clear on the
   overhead prior's 11 %, on a host where the same server without speculation later measured 58 % apart.

The regime is read from the server's own decode step: the best stage's median time per output token
(TPOT p50) times the tokens one step yields (the accept length; 1 without speculation). On the real H200
logs of the tiny models (tests/fixtures/sglang/0.5.17) a decode step takes 3.8-7.0 ms (median of each
log; tp 2 is the slowest), all of it scheduling and launch overhead. The 8B shape's steps took 10.4 ms
(3079 tok/s at concurrency 32, accept length 1) and 15 ms (EAGLE-3 s3k1d4, 2090 tok/s). A step of
`GPU_BOUND_STEP_MS` (between 7.0 and 10.4) or more is GPU work. A short step is not always overhead,
though: the 8B shape without speculation steps in 5.0 ms at concurrency 8 and 5.6 ms at 32 (the
llama8b-trees records), 3.3 ms of it reading its 15 GB of weights at the H200's 4.8 TB/s, and the step
alone called it overhead-bound, so the baseline was the answer only by a 7.5 % launch-to-launch prior's
lead. So the weights one GPU reads each step decide first (from the launch's memory account): from
`GPU_BOUND_WEIGHTS_GIB` on it is GPU work (the tiny models hold 0.10 GB); the step decides where the
account is missing.

A stage without a steady window (too short: it measured the ramp-up) moves by about 15 % from one
repeat to the next whatever the regime; its within-launch figure is then `RAMP_UP_STAGE_SD`.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from orchestrator.bench.steady import t975
from orchestrator.records import StageMetrics

GPU_BOUND_STEP_MS = 8.5  # a decode step at least this long is GPU work (see the module's docstring)
# Weights a GPU reads every decode step: at least this much is GPU work whatever the step's length. The
# 8B shape (14.98 GB a GPU) steps in 5.0 ms without speculation on an H200, 3.3 ms of it reading its
# weights, as short as the tiny models' pure overhead (0.10 GB: 3.8-7.0 ms); see the module's docstring.
GPU_BOUND_WEIGHTS_GIB = 2.0
RAMP_UP_STAGE_SD = 0.15  # a stage with no steady window: sub-second stages move about 15 %
MIN_POOLED_DOF = 2  # one configuration launched three times, or two launched twice each
Z975 = 1.96  # a prior is taken as known: the normal quantile, not Student's


class Regime(StrEnum):
    """What bounds a decode step, as the launches measured it."""

    GPU_BOUND = "gpu-bound"
    OVERHEAD_BOUND = "overhead-bound"


class NoiseSource(StrEnum):
    """Where the spread came from: the study's repeated launches, or the prior for its regime."""

    POOLED = "pooled"
    PRIOR = "prior"


@dataclass(frozen=True)
class Prior:
    """Relative standard deviations of one launch's figure, as reference/noise.md measured them."""

    launch_sd: float  # launch to launch
    stage_sd: float  # between the stages of one launch


PRIORS = {
    Regime.GPU_BOUND: Prior(launch_sd=0.007, stage_sd=0.01),
    Regime.OVERHEAD_BOUND: Prior(launch_sd=0.075, stage_sd=0.08),
}


@dataclass(frozen=True)
class StageTiming:
    """What one launch's measured stage says about its noise."""

    step_ms: float | None  # a decode step: TPOT p50 x tokens per step; None when not measured
    steady: bool  # the stage had a steady window (not only the ramp-up)
    weights_gib: float | None = None  # the target's weights on one GPU (the launch's memory account)


def stage_timing(stage: StageMetrics | None, weights_gib: float | None = None) -> StageTiming:
    if stage is None or stage.tpot_p50_ms <= 0:
        return StageTiming(None, bool(stage and stage.steady), weights_gib)
    per_step = stage.accept_length if stage.accept_length and stage.accept_length > 1 else 1.0
    return StageTiming(stage.tpot_p50_ms * per_step, stage.steady, weights_gib)


def regime_of(timings: Sequence[StageTiming]) -> tuple[Regime, float | None]:
    """The regime of the launches and their median decode step in ms: GPU-bound when each GPU reads
    `GPU_BOUND_WEIGHTS_GIB` of weights a step or the step takes `GPU_BOUND_STEP_MS`; without either
    figure the overhead prior, the wider one, is used."""
    steps = [t.step_ms for t in timings if t.step_ms is not None]
    weights = [t.weights_gib for t in timings if t.weights_gib is not None]
    step = statistics.median(steps) if steps else None
    if weights and statistics.median(weights) >= GPU_BOUND_WEIGHTS_GIB:
        return Regime.GPU_BOUND, step
    if step is None:
        return Regime.OVERHEAD_BOUND, None
    return (Regime.GPU_BOUND if step >= GPU_BOUND_STEP_MS else Regime.OVERHEAD_BOUND), step


@dataclass(frozen=True)
class Noise:
    """The relative standard deviation of one launch's figure, and where it came from."""

    relative_sd: float
    source: NoiseSource
    regime: Regime
    step_ms: float | None
    dof: int | None = None  # pooled: the degrees of freedom; a prior is taken as known (None)
    repeated: int = 0  # pooled: launches of configurations launched more than once
    configurations: int = 0  # pooled: how many such configurations
    launch_sd: float = 0.0  # prior: its two parts
    stage_sd: float = 0.0
    ramp_up: bool = False  # prior: the stages had no steady window
    widened: bool = False  # prior: a single repeat measured more, and set `relative_sd`

    @property
    def quantile(self) -> float:
        """The 97.5 % quantile for intervals and gaps: Student's t for a pooled spread."""
        return t975(self.dof) if self.dof else Z975

    def gap_noise(self, launches_a: int, launches_b: int) -> float:
        """The relative gap between two configurations' figures that noise alone opens at 95 %, with
        ``launches_a`` and ``launches_b`` launches behind them."""
        return self.quantile * self.relative_sd * math.sqrt(1 / launches_a + 1 / launches_b)

    def interval(self, centre: float, launches: int) -> tuple[float, float] | None:
        """95 % interval of a configuration's figure from the pooled spread; None from a prior (an
        interval is only stated when the study measured its spread)."""
        if self.source is not NoiseSource.POOLED:
            return None
        half = self.quantile * self.relative_sd * centre / math.sqrt(launches)
        return (max(0.0, centre - half), centre + half)

    def describe(self) -> str:
        """Where the figure came from, in words."""
        if self.source is NoiseSource.POOLED:
            return (
                f"measured: {_pct(self.relative_sd)} launch to launch, pooled over {self.repeated} launches "
                f"of {self.configurations} configuration(s) launched more than once on one machine"
            )
        article = "an" if self.regime is Regime.OVERHEAD_BOUND else "a"
        step = f" whose decode step takes {self.step_ms:.1f} ms" if self.step_ms is not None else ""
        stage = " as its stages were too short to be steady" if self.ramp_up else ""
        widened = (
            f", widened to {_pct(self.relative_sd)} by the one configuration launched twice on one machine "
            "(too few repeats to replace the prior, more spread than it allows)"
            if self.widened
            else ""
        )
        return (
            f"prior for {article} {self.regime.value} node{step}: {_pct(self.launch_sd)} launch to launch, "
            f"{_pct(self.stage_sd)} within a launch{stage}{widened}"
        )


def _pct(x: float) -> str:
    return f"{100 * x:.1f} %"


@dataclass(frozen=True)
class Spread:
    """Launch-to-launch spread pooled over every configuration launched more than once."""

    relative_sd: float
    dof: int
    repeated: int
    configurations: int


def pooled_spread(groups: Sequence[Sequence[float]]) -> Spread | None:
    """The pooled relative spread of the groups with two values or more (None without any)."""
    num, dof, repeated, configurations = 0.0, 0, 0, 0
    for values in groups:
        if len(values) < 2:
            continue
        mean = statistics.fmean(values)
        if mean <= 0:
            continue
        num += (len(values) - 1) * (statistics.stdev(values) / mean) ** 2
        dof += len(values) - 1
        repeated += len(values)
        configurations += 1
    return Spread(math.sqrt(num / dof), dof, repeated, configurations) if dof else None


def calibrate(
    groups: Sequence[Sequence[float]],
    timings: Sequence[StageTiming],
    regime_timings: Sequence[StageTiming] = (),
) -> Noise:
    """The noise of one launch's figure: the pooled spread of ``groups`` (each configuration's launch
    figures) once it has `MIN_POOLED_DOF` degrees of freedom, else the prior for the regime that
    ``regime_timings`` show (the server without speculation's: the target's own step), or without them
    ``timings`` (the stages of the launches that could be the answer)."""
    regime, step = regime_of(regime_timings or timings)
    spread = pooled_spread(groups)
    if spread is not None and spread.dof >= MIN_POOLED_DOF:
        return Noise(
            spread.relative_sd,
            NoiseSource.POOLED,
            regime,
            step,
            dof=spread.dof,
            repeated=spread.repeated,
            configurations=spread.configurations,
        )
    prior = PRIORS[regime]
    ramp_up = any(not t.steady for t in timings)
    stage_sd = max(prior.stage_sd, RAMP_UP_STAGE_SD) if ramp_up else prior.stage_sd
    sd = math.hypot(prior.launch_sd, stage_sd)
    # A repeat's spread is a whole launch's figure (its offset and its stage) against another's, the same
    # quantity as `sd`; with one degree of freedom it can only widen the prior, never narrow it.
    widened = spread is not None and spread.relative_sd > sd
    return Noise(
        spread.relative_sd if spread is not None and widened else sd,
        NoiseSource.PRIOR,
        regime,
        step,
        launch_sd=prior.launch_sd,
        stage_sd=stage_sd,
        ramp_up=ramp_up,
        widened=widened,
    )
