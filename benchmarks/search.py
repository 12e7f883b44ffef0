"""Benchmark 1, search efficiency: launches, OOM launches and GPU-hours to reach 98 % of the best.

Per case (a simulated profile with its discretised space) the oracle evaluates the whole grid once; its
best feasible tok/s is the reference. Each strategy then runs with the same launch budget over several
seeds. "To 98 %" counts launches (and GPU time: start-up, benchmark and stop, times the node's GPUs)
until the first launch whose measured objective reaches 98 % of the reference; a run that never gets
there within the budget is censored (shown as "> budget", and its median is then unbounded).
"""

from __future__ import annotations

import logging
import math
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from benchmarks.oracle import Oracle
from benchmarks.spaces import CASES, BenchCase, case_spec, enumerate_space
from benchmarks.strategies import STRATEGIES, SearchRun, quiet_optuna
from benchmarks.table import Row, median, ratio
from orchestrator.records import ServerConfig
from orchestrator.sim.profile import load_profile

log = logging.getLogger(__name__)
BENCH = "1 search efficiency"
REFERENCE = "specsweep"
DETERMINISTIC = ("grid", "auto_benchmark")


def shape(config: ServerConfig) -> str:
    """The speculative tree of a configuration: steps, top-k, draft tokens."""
    c = config
    return f"s{c.speculative_num_steps}k{c.speculative_eagle_topk}d{c.speculative_num_draft_tokens}"


@dataclass(frozen=True)
class SearchSettings:
    budget: int = 40
    seeds: int = 20
    cases: tuple[str, ...] = tuple(CASES)
    target: float = 0.98


@dataclass(frozen=True)
class RunSummary:
    reached: bool
    launches_to: float  # inf when not reached
    gpu_h_to: float  # inf when not reached
    oom_launches: int  # infeasible launches (start-up OOM or KV pressure) in the whole run
    best_frac: float  # best objective the run measured / the grid's best
    repeats: int  # launches of a configuration the run had already launched
    answered: int  # specsweep: proposals of a measured configuration answered from the record (no launch)
    launches: int
    failed_at: tuple[str, ...] = ()  # failure stage of each infeasible launch
    best_shape: str = ""  # the speculative tree of the best configuration the run measured


def summarize(run: SearchRun, best: float, target: float) -> RunSummary:
    threshold = target * best
    gpu_s = 0.0
    reached_at: int | None = None
    gpu_at = math.inf
    seen: set[object] = set()
    repeats = 0
    for i, launch in enumerate(run.launches, 1):
        gpu_s += launch.gpu_s
        repeats += launch.config in seen
        seen.add(launch.config)
        if reached_at is None and launch.objective is not None and launch.objective >= threshold:
            reached_at, gpu_at = i, gpu_s / 3600
    measured = [lc.objective for lc in run.launches if lc.objective is not None]
    best_launch = max(
        (lc for lc in run.launches if lc.objective is not None),
        key=lambda lc: lc.objective or 0.0,
        default=None,
    )
    return RunSummary(
        reached=reached_at is not None,
        launches_to=float(reached_at) if reached_at is not None else math.inf,
        gpu_h_to=gpu_at,
        oom_launches=sum(1 for lc in run.launches if lc.status.infeasible),
        best_frac=max(measured, default=0.0) / best,
        repeats=repeats,
        answered=run.repeats_answered,
        launches=len(run.launches),
        failed_at=tuple(lc.failed_at for lc in run.launches if lc.status.infeasible),
        best_shape=shape(best_launch.config) if best_launch is not None else "",
    )


@dataclass(frozen=True)
class CaseResult:
    case: BenchCase
    configs: int
    feasible: int
    near_best: int
    best: float
    oom_share: float
    summaries: dict[str, list[RunSummary]]
    mispredicted: list[int]  # specsweep: launches the memory model had predicted to fit, then OOMed
    skipped: list[int]
    grid_gpu_h: float
    shape_best: dict[str, float]  # best objective of each speculative tree / the grid's best


def run_case(case: BenchCase, settings: SearchSettings) -> CaseResult:
    profile = load_profile(case.name)
    spec = case_spec(case, gpus=profile.gpu_count)
    oracle = Oracle(spec, profile)
    configs = enumerate_space(case.space)
    evaluations = [oracle.evaluate(c) for c in configs]
    objectives = [e.objective for e in evaluations if e.objective is not None]
    best = max(objectives)
    shape_best: dict[str, float] = {}
    for e in evaluations:
        if e.objective is not None:
            key = shape(e.config)
            shape_best[key] = max(shape_best.get(key, 0.0), e.objective / best)
    summaries: dict[str, list[RunSummary]] = {}
    mispredicted: list[int] = []
    skipped: list[int] = []
    grid_gpu_h = 0.0
    for name, strategy in STRATEGIES.items():
        seeds = 1 if name in DETERMINISTIC else settings.seeds
        for seed in range(seeds):
            t0 = time.perf_counter()
            run = strategy(oracle, configs, settings.budget, seed)
            log.debug("%s %s seed %d: %.2f s", case.name, name, seed, time.perf_counter() - t0)
            summaries.setdefault(name, []).append(summarize(run, best, settings.target))
            if name == "grid":
                grid_gpu_h = sum(lc.gpu_s for lc in run.launches) / 3600
            if name == REFERENCE:
                mispredicted.append(run.mispredicted)
                skipped.append(run.skipped)
    return CaseResult(
        case,
        len(configs),
        len(objectives),
        sum(1 for o in objectives if o >= settings.target * best),
        best,
        sum(1 for e in evaluations if e.status.infeasible) / len(evaluations),
        summaries,
        mispredicted,
        skipped,
        grid_gpu_h,
        shape_best,
    )


def _shown_launches(value: float, budget: int) -> str:
    return f"> {budget}" if math.isinf(value) else f"{value:g}"


def case_rows(res: CaseResult, settings: SearchSettings) -> list[Row]:
    name = res.case.name
    rows = [
        Row(BENCH, name, "space", "configurations / feasible / within 98 % of best",
            float(res.configs), f"{res.configs} / {res.feasible} / {res.near_best}"),
        Row(BENCH, name, "space", "grid best (tok/s)", res.best, f"{res.best:.1f}"),
    ]  # fmt: skip
    ref = res.summaries[REFERENCE]
    ref_stats = _stats(ref)
    for strategy, runs in res.summaries.items():
        stats = _stats(runs)
        n = len(runs)
        budget = res.configs if strategy == "grid" else settings.budget
        variant = f"{strategy} (all {res.configs})" if strategy == "grid" else strategy
        reached = sum(r.reached for r in runs)
        rows += [
            Row(BENCH, name, variant, "reached 98 % (runs)", reached / n, f"{reached}/{n}",
                ratio(reached / n, ref_stats["reached"])),
            Row(BENCH, name, variant, "launches to 98 % (median)", stats["launches_to"],
                _shown_launches(stats["launches_to"], budget),
                ratio(stats["launches_to"], ref_stats["launches_to"])),
            Row(BENCH, name, variant, "GPU-h to 98 % (median)", stats["gpu_h_to"],
                "not reached" if math.isinf(stats["gpu_h_to"]) else f"{stats['gpu_h_to']:.2f}",
                ratio(stats["gpu_h_to"], ref_stats["gpu_h_to"])),
            Row(BENCH, name, variant, f"OOM launches in {budget} (median)", stats["oom_launches"],
                f"{stats['oom_launches']:g}", ratio(stats["oom_launches"], ref_stats["oom_launches"])),
            Row(BENCH, name, variant, f"best in {budget} launches, % of grid best (median)",
                100 * stats["best_frac"], f"{100 * stats['best_frac']:.1f}",
                ratio(stats["best_frac"], ref_stats["best_frac"])),
        ]  # fmt: skip
    return rows


def _stats(runs: Sequence[RunSummary]) -> dict[str, float]:
    return {
        "reached": sum(r.reached for r in runs) / len(runs),
        "launches_to": median([r.launches_to for r in runs]),
        "gpu_h_to": median([r.gpu_h_to for r in runs]),
        "oom_launches": median([float(r.oom_launches) for r in runs]),
        "best_frac": median([r.best_frac for r in runs]),
        "repeats": median([float(r.repeats) for r in runs]),
        "answered": median([float(r.answered) for r in runs]),
        "launches": median([float(r.launches) for r in runs]),
    }


def case_notes(res: CaseResult, settings: SearchSettings) -> list[str]:
    """Plain statements where specsweep does not lead, with the figures that say why."""
    name = res.case.name
    notes: list[str] = []
    ref_runs = res.summaries[REFERENCE]
    ref = _stats(ref_runs)
    leaders = []
    for strategy, runs in res.summaries.items():
        if strategy in (REFERENCE, "grid", "specsweep_ungrouped"):
            continue
        s = _stats(runs)
        if s["reached"] > ref["reached"] or (
            s["reached"] == ref["reached"] and s["launches_to"] < ref["launches_to"]
        ):
            shown = _shown_launches(s["launches_to"], settings.budget)
            leaders.append(f"{strategy} reached 98 % in {s['reached']:.0%} of runs, median {shown} launches")
        elif s["gpu_h_to"] < ref["gpu_h_to"]:
            leaders.append(
                f"{strategy} needed fewer GPU-h to 98 % ({s['gpu_h_to']:.2f} against {ref['gpu_h_to']:.2f})"
            )
    if leaders:
        ranked = sorted(res.shape_best.items(), key=lambda kv: -kv[1])
        near = [k for k, v in ranked if v >= settings.target]
        runner_up = next(((k, v) for k, v in ranked if v < settings.target), None)
        why = [
            f"{res.oom_share:.0%} of the space is infeasible"
            + (
                ", so the oom constraint and the memory model have nothing to learn"
                if res.oom_share == 0
                else ""
            ),
            f"every configuration within 98 % of the best has the speculative tree {', '.join(near)}"
            + (f" (the next tree, {runner_up[0]}, reaches {100 * runner_up[1]:.2f} %)" if runner_up else ""),
        ]
        missed = Counter(r.best_shape for r in ref_runs if not r.reached)
        if missed:
            top = ", ".join(f"{k} in {n}" for k, n in missed.most_common(3))
            why.append(
                f"in the {sum(missed.values())} runs that missed, specsweep's best tree was {top}: "
                "it settles on a tree near the top and spends the rest of its launches on memory flags that "
                f"do not change the speed (TPE re-proposed a configuration it had measured a median of "
                f"{ref['answered']:g} times per run, answered from the record without a launch)"
            )
        if ref["launches"] < settings.budget:
            why.append(
                f"specsweep stopped after a median of {ref['launches']:g} launches: the driver stops once "
                "its skips (predicted OOMs and answered repeats) reach five times the budget"
            )
        ungrouped = res.summaries.get("specsweep_ungrouped")
        if ungrouped:
            g = _stats(ungrouped)
            why.append(
                "without grouped TPE (row specsweep_ungrouped, the ablation) the same driver reached 98 % in "
                f"{g['reached']:.0%} of runs (median {_shown_launches(g['launches_to'], settings.budget)} "
                "launches)"
            )
        notes.append(
            f"{name}: specsweep does not lead (it reached 98 % in {ref['reached']:.0%} of runs, median "
            f"{_shown_launches(ref['launches_to'], settings.budget)} launches): "
            + "; ".join(leaders)
            + ". Why: "
            + "; ".join(why)
            + "."
        )
    if any(s.failed_at for runs in res.summaries.values() for s in runs):
        parts = []
        for strategy in ("plain_tpe", "random", REFERENCE):
            runs = res.summaries[strategy]
            counts = Counter(stage for r in runs for stage in r.failed_at)
            per_run = ", ".join(f"{stage} {n / len(runs):.1f}" for stage, n in counts.most_common())
            parts.append(f"{strategy}: {per_run or 'none'}")
        notes.append(
            f"{name}: OOM launches per run by failure stage — " + "; ".join(parts) + ". specsweep skipped a "
            f"median of {median([float(s) for s in res.skipped]):g} proposals as predicted OOMs, "
            "and launched "
            f"a median of {median([float(m) for m in res.mispredicted]):g} that its memory model had "
            "predicted to fit."
        )
    return notes


def run_search(settings: SearchSettings) -> tuple[list[Row], list[str]]:
    quiet_optuna()
    rows: list[Row] = []
    notes: list[str] = []
    for name in settings.cases:
        t0 = time.perf_counter()
        res = run_case(CASES[name], settings)
        log.info("search %s: %.1f s", name, time.perf_counter() - t0)
        rows += case_rows(res, settings)
        notes += case_notes(res, settings)
        notes.append(
            f"{name}: the exhaustive grid costs {res.grid_gpu_h:.1f} GPU-h for {res.configs} launches "
            f"({res.oom_share:.0%} of them OOM or KV pressure); {res.case.why}."
        )
    notes.append(
        f"Search: budget {settings.budget} launches per run, {settings.seeds} seeds for random, "
        "plain_tpe and "
        "specsweep (grid and auto_benchmark are deterministic: one run). A launch's GPU time is "
        "the profile's "
        "real-world start-up (imports, weight loading, KV allocation, graph capture, server start), the "
        "benchmark stages run before any prune, and the stop (3.4 s, or 0.1 s after an OOM), times "
        "the node's "
        "GPUs; a predicted-OOM skip costs nothing. OOM launches include KV-pressure failures. The "
        "oracle is the "
        "simulated node's memory walk and speed model as noise-free expectations; ties are common because "
        "the memory flags barely change speed at these concurrencies. Against the live simulated server "
        "(tests/test_benchmarks.py) its memory account and KV-pressure verdicts are the same, and its tok/s "
        "are 15-25 % higher on h200-tiny: the live server adds its own Python time to every ~3 ms step."
    )
    return rows, notes
