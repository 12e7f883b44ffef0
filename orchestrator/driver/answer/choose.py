"""The sweep's one answer: a configuration, its median tok/s over its launches, which launches those are,
and how sure the sweep is that it beats the runner-up.

The console, `best.json`, the MLflow parent run and the report all read this one choice, so a user never
sees one trial in one place and another launch of the same configuration, or another figure, elsewhere.

The server without speculation (the baseline launch) is a candidate too: when its median is above the best
speculative configuration's, it is the answer (a weak draft, or a load too heavy for speculation to pay),
whatever the margin, and its verdict says how sure that is (a lead within the noise reads "too close to
call"): the speculative figure is the best of several draws, so a lead the noise could hide is more often
real than not. Otherwise the best speculative configuration is the answer, its verdict against the
baseline kept beside it (`Answer.versus_nospec`).
A configuration is named by its label (`ServerConfig.label()`, the `config` tag of its MLflow runs), so
the same function answers from the sweep's records and from runs read back from MLflow.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum

from pydantic import BaseModel, ConfigDict

from orchestrator.driver.answer.confirm import candidates, machine, measured
from orchestrator.driver.answer.groups import (
    Group,
    Launch,
    group_launches,
    left_out,
    on_one_machine,
    repeat_groups,
)
from orchestrator.driver.answer.noise import (
    Noise,
    NoiseSource,
    Regime,
    StageTiming,
    calibrate,
    regime_of,
    stage_timing,
)
from orchestrator.driver.answer.ranking import estimates
from orchestrator.driver.speculation.predictions import Prediction
from orchestrator.records import TrialRecord


def _objective_stage(record: TrialRecord) -> StageTiming:
    stages = [s for s in record.result.stages if s.output_tok_per_s == record.objective]
    memory = record.result.memory
    weights = memory.weights_gb if memory is not None else None  # SGLang's "GB" are GiB
    return stage_timing(stages[0] if stages else record.result.best_stage, weights)


def answer_launches(records: Sequence[TrialRecord], lossy: Collection[int] = ()) -> list[Launch]:
    """The speculative launches that can be the answer: measured (ok, not pruned, an objective), not the
    baseline (`baseline_launches`) and not a draft that changed the greedy output."""
    return [
        Launch(r.number, r.result.config.label(), float(r.objective or 0.0), _objective_stage(r), machine(r))
        for r in sorted(measured(candidates(records, lossy)), key=lambda r: r.number)
    ]


def baseline_launches(records: Sequence[TrialRecord]) -> list[Launch]:
    """The measured launches of the server without speculation (the baseline), in launch order."""
    base = [r for r in records if r.baseline and not r.result.config.speculative]
    return [
        Launch(r.number, r.result.config.label(), float(r.objective or 0.0), _objective_stage(r), machine(r))
        for r in sorted(measured(base), key=lambda r: r.number)
    ]


def measured_regime(records: Sequence[TrialRecord]) -> Regime:
    """The regime the measured launches show, as the answer's noise reads it (`ranked_groups`): the
    server without speculation's step where it was measured (the target's own), else every launch's."""
    base = [x.timing for x in baseline_launches(records)]
    return regime_of(base or [_objective_stage(r) for r in measured(records)])[0]


def rank_groups(
    groups: Sequence[Group], noise: Noise, predictions: Mapping[str, Prediction] | None = None
) -> list[Group]:
    """The groups with their estimates (`answer.ranking`: each centre shrunk by the noise of its launches,
    toward its prediction where ``predictions`` holds one by configuration), best estimate first; equal
    estimates: more launches first, then the earliest."""
    predicted = [(predictions or {}).get(g.config) for g in groups]
    values = estimates([g.values for g in groups], noise.relative_sd, predicted)
    ranked = [
        replace(g, estimate=e, predicted=p is not None)
        for g, e, p in zip(groups, values, predicted, strict=True)
    ]
    ranked.sort(key=lambda g: (-(g.estimate or 0.0), -len(g.numbers), g.numbers[0]))
    return ranked


def ranked_groups(
    launches: Sequence[Launch],
    baseline: Sequence[Launch] = (),
    predictions: Mapping[str, Prediction] | None = None,
) -> tuple[list[Group], Noise] | None:
    """The speculative configurations as the answer ranks them (`rank_groups`), and the noise that
    ranking used; None with no speculative launch measured. The confirmation relaunches in this order
    (`conclusion.answer_order`), so that the configuration answered is the one confirmed."""
    groups = group_launches(launches)
    if not groups:
        return None
    # The regime and a ramp-up are read off the launches the verdict decides between (the leader and the
    # runner-up): a losing configuration whose stage never settled says nothing about theirs.
    contenders = {g.config for g in groups[:2]}
    # The regime is the node's with this target: the server without speculation's decode step when it
    # ran (a speculative step drafts and verifies a tree, longer on a node no more GPU-bound), so that
    # every comparison of one study uses one prior.
    target = [x.timing for x in baseline]
    timings = [x.timing for x in launches if x.config in contenders]
    noise = calibrate(repeat_groups(groups), timings, target)
    return rank_groups(groups, noise, predictions), noise


class Call(StrEnum):
    CLEARLY_AHEAD = "clearly ahead"
    TOO_CLOSE = "too close to call"
    ALONE = "no other configuration to compare with"


class Verdict(BaseModel):
    """How sure the sweep is of its answer (best.json's ``verdict``; the console prints ``statement``)."""

    model_config = ConfigDict(frozen=True)

    call: Call
    statement: str
    noise_source: NoiseSource
    regime: Regime
    launch_sd: float  # relative SD of one launch's figure the call used
    noise: float | None = None  # the relative gap noise alone opens against the runner-up (95 %)
    gap: float | None = None  # the answer's relative lead over the runner-up
    runner_up: list[int] = []  # the runner-up's launches
    runner_up_median: float | None = None
    too_close_with: list[int] = []  # the first launch of each configuration within the noise
    ci95: tuple[float, float] | None = None  # only from a measured (pooled) spread


@dataclass(frozen=True)
class Answer:
    """The configuration to run, its median over its launches, and which launches those are."""

    config: str
    launches: tuple[int, ...]
    values: tuple[float, ...]
    median: float
    representative: int  # the launch whose record gives the command, memory and acceptance
    verdict: Verdict
    nospec: bool = False  # the answer is the server without speculation (the baseline launch)
    # The best speculative configuration against the baseline: the verdict of that comparison when the
    # speculative answer stands (None when the answer is the baseline: its `verdict` is that comparison)
    versus_nospec: Verdict | None = None
    comparison: NospecComparison | None = None  # what that comparison used, for the per-level calls
    estimate: float | None = None  # what ranked it first among the speculative ones (`answer.ranking`)
    # The spread its verdict judged with: what a concurrency level's best is judged with too
    # (`runtime_policy.best_by_concurrency`), so that no level contradicts the answer on a draw.
    noise: Noise | None = None

    def name(self) -> str:
        return Group(self.config, self.launches, self.values).name()


@dataclass(frozen=True)
class NospecComparison:
    """The speculative configuration the baseline is compared with (the ranked first, or where the baseline
    is the answer the fastest measured beside it), the baseline, and the noise their comparison used."""

    speculative: Group
    baseline: Group
    noise: Noise


def choose_answer(
    launches: Sequence[Launch],
    baseline: Sequence[Launch] = (),
    predictions: Mapping[str, Prediction] | None = None,
) -> Answer | None:
    """The speculative configuration with the best estimate (its launches' centre, shrunk by their noise,
    toward the speculation model's prediction where ``predictions`` holds one: `answer.ranking`) and its
    verdict against the runner-up, unless
    the server without speculation (``baseline``'s launches) measured faster: then that server, with the
    verdict against the best speculative configuration. With no speculative launch measured, the server
    without speculation is the answer when it was measured (`_baseline_alone`); None when nothing was."""
    ranked = ranked_groups(launches, baseline, predictions)
    if ranked is None:
        return _baseline_alone(baseline)
    groups, noise = ranked
    target = [x.timing for x in baseline]
    best = groups[0]
    answer = _answer(best, judge(groups, noise), noise, estimate=best.estimate)
    if not baseline:
        return answer
    base = replace(group_launches(baseline)[0], nospec=True)
    # Its own noise: the two it decides between give the regime, every repeat the pooled spread.
    timings = [x.timing for x in [*launches, *baseline] if x.config in (best.config, base.config)]
    noise = calibrate(repeat_groups([*groups, base]), timings, target)
    # On the machine both ran on, when they did: another machine's launches measure the machine too.
    spec, base = on_one_machine(best, base)
    comparison = NospecComparison(spec, base, noise)
    if base.median <= spec.median:
        return replace(answer, versus_nospec=judge([spec, base], noise), comparison=comparison)
    rest = groups[1:]
    if spec.elsewhere or base.elsewhere:
        # On that machine the one to beat is the fastest speculative configuration there, which a
        # ranking over every machine's launches may have put lower.
        mine = _beside(groups, base)
        spec, rest = mine[0], mine[1:]
        comparison = NospecComparison(spec, base, noise)
        if spec.median >= base.median:
            # It beat the server without speculation there, where the ranked first lost: on the one
            # machine that compared them all, speculation pays, and this is its fastest configuration.
            full = next(g for g in groups if g.config == spec.config)
            return replace(
                _answer(full, judge([spec, *rest], noise), noise, estimate=full.estimate),
                versus_nospec=judge([spec, base], noise),
                comparison=comparison,
            )
    # The one it is judged against is the fastest speculative configuration measured, where that is
    # below it too: the ranked first is the best estimate among trees, but a user checks "speculation
    # does not pay" by the table's fastest row (the real pair on one H100 put s2k4d9 first and was said
    # "41.5 % above" it under a row where s4k8d16 read 1.5 % more); the claim is then also the weaker.
    fastest = next(iter(_beside(rest, base)), spec)
    if spec.median < fastest.median < base.median:
        rest = [spec, *(g for g in rest if g.config != fastest.config)]
        spec = fastest
        comparison = NospecComparison(spec, base, noise)
    # The server without speculation measured faster: it is the answer, as the best median is among
    # speculative configurations, and its verdict says how sure (a lead within the noise reads "too
    # close to call"). Kept speculative, a lead the noise could hide cost the user that lead whenever
    # it was real, and more often real than not: the speculative figure is the best of several draws.
    return _answer(base, judge([base, spec, *rest], noise), noise, nospec=True, comparison=comparison)


def _beside(groups: Sequence[Group], base: Group) -> list[Group]:
    """The speculative configurations that ran on a machine the baseline ran on (launches of unknown
    machine count as one), each as it compares with it (`groups.on_one_machine`), fastest first."""
    shared = (
        g for g in groups if not (g.machines and base.machines and not set(g.machines) & set(base.machines))
    )
    return sorted((on_one_machine(g, base)[0] for g in shared), key=lambda g: -g.median)


def _baseline_alone(baseline: Sequence[Launch]) -> Answer | None:
    """The server without speculation when no speculative configuration was measured: the fastest way
    to serve that the sweep knows of. A sweep's first launch is the baseline, so where speculation never
    pays the answer is right from that launch on; and a sweep whose every speculative launch failed, or
    changed the greedy output, still hands the user a measured command (with no speculative flag)."""
    if not baseline:
        return None
    base = replace(group_launches(baseline)[0], nospec=True)
    noise = calibrate(repeat_groups([base]), [x.timing for x in baseline])
    return _answer(base, judge([base], noise), noise, nospec=True)


def _answer(
    group: Group,
    verdict: Verdict,
    noise: Noise,
    *,
    nospec: bool = False,
    comparison: NospecComparison | None = None,
    estimate: float | None = None,
) -> Answer:
    """``group`` as the answer: its configuration, launches and median, with the verdict that chose it
    (one place reads a group's figures into an answer, whichever way it won)."""
    return Answer(
        group.config,
        group.numbers,
        group.values,
        group.median,
        group.representative,
        verdict,
        nospec=nospec,
        comparison=comparison,
        estimate=estimate,
        noise=noise,
    )


def percent(x: float) -> str:
    """A relative figure as the verdicts print it: 0.123 -> "12.3 %"."""
    return f"{100 * x:.1f} %"


def lead(a: float, b: float) -> float:
    """``a``'s relative lead over ``b`` (negative: behind; infinite over a figure of nothing)."""
    return a / b - 1 if b > 0 else float("inf")


def clearly_ahead(a: float, b: float, limit: float) -> bool:
    """Whether ``a`` leads ``b`` by more than ``limit``, the gap noise alone opens between them at 95 %: the
    one test every comparison of the answer makes, the verdict's and each concurrency level's
    (`answer.levels`), from either side."""
    return lead(a, b) > limit


def _counts(a: Group, b: Group) -> str:
    na, nb = len(a.numbers), len(b.numbers)
    if na == nb:
        return f"{na} launch each" if na == 1 else f"{na} launches each"
    return f"{na} launch{'es' if na > 1 else ''} against {nb}"


def _too_close(a: Group, b: Group, noise: Noise) -> bool:
    """Whether ``a`` is not clearly ahead of ``b`` (compared on the machine both ran on, where they did)."""
    a, b = on_one_machine(a, b)
    limit = noise.gap_noise(len(a.numbers), len(b.numbers))
    return b.median > 0 and not clearly_ahead(a.median, b.median, limit)


def judge(groups: Sequence[Group], noise: Noise) -> Verdict:
    """The answer (``groups[0]``) against the runner-up: 'clearly ahead' when its lead is larger than
    the gap noise alone opens between them at 95 %, else 'too close to call'. No interval is stated
    unless the study measured its own spread."""
    best = groups[0]
    n = len(best.numbers)
    ci = noise.interval(best.median, n)
    own = f"{best.name()}: median {best.median:.1f} tok/s of {n} launches" if n > 1 else ""
    if ci is not None:
        own = f"{own or best.name() + f': {best.median:.1f} tok/s'}, 95 % interval {ci[0]:.1f}-{ci[1]:.1f}"
    if len(groups) == 1:
        head = own or f"{best.subject() if best.nospec else best.name()}: {best.median:.1f} tok/s"
        # Without speculation alone: speculative trials may have served and been set aside (lossy, pruned,
        # over a latency limit; the table says which), so the verdict says none is a candidate.
        other = (
            "no speculative configuration is a candidate"
            if best.nospec
            else "no other speculative configuration completed"
        )
        return Verdict(
            call=Call.ALONE,
            statement=f"{head}; {other}, so there is nothing to compare it with",
            noise_source=noise.source,
            regime=noise.regime,
            launch_sd=noise.relative_sd,
            ci95=ci,
        )
    # Each pair on the machine both ran on, where they did (`groups.on_one_machine`).
    ahead, runner = on_one_machine(best, groups[1])
    gap = lead(ahead.median, runner.median)
    limit = noise.gap_noise(len(ahead.numbers), len(runner.numbers))
    call = Call.CLEARLY_AHEAD if clearly_ahead(ahead.median, runner.median, limit) else Call.TOO_CLOSE
    standing = f"{percent(gap)} ahead of {runner.subject()}"
    if gap < 0 and best.predicted:  # ranked first on its estimate, which the model's prediction moved
        standing = (
            f"{percent(-gap)} behind {runner.subject()} by median but ranked first, the speculation model "
            "fitted on every launch predicting it ahead (each figure pulled toward the model's by the "
            "noise of its own launches)"
        )
    elif gap < 0:  # ranked first on its estimate: the runner-up's higher median stands on fewer launches
        standing = (
            f"{percent(-gap)} behind {runner.subject()} by median but ranked first, its figure the surer "
            "of the two, the runner-up's pulled toward the rest by its fewer launches"
        )
    close = [g.numbers[0] for g in groups[1:] if _too_close(best, g, noise)]
    # The figure is the threshold of this comparison (what noise alone opens between these two at 95 %,
    # with their launch counts), not the node's noise: it was once labelled so, and read as such.
    statement = (
        f"{_counts(ahead, runner)}: {ahead.subject()} is {standing}; noise "
        f"alone opens gaps of up to {percent(limit)} in this comparison ({noise.describe()}), so "
        f"{call.value}"
    )
    if where := left_out(ahead, runner):
        statement = f"{where}: {statement}"
    # Each by all its launches: a configuration launched three times named by its first read as one launch.
    others = [g for g in groups[2:] if g.numbers[0] in close]
    if others:
        statement += "; also too close to call: " + ", ".join(g.subject() for g in others)
    if own:
        statement = f"{own}; {statement}"
    return Verdict(
        call=call,
        statement=statement,
        noise=limit,
        gap=gap,
        runner_up=list(runner.numbers),
        runner_up_median=runner.median,
        too_close_with=close,
        noise_source=noise.source,
        regime=noise.regime,
        launch_sd=noise.relative_sd,
        ci95=ci,
    )
