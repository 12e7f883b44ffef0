"""Benchmark 1, search efficiency on noisy launches: how far each strategy's answer is from the optimum
(regret), how often it is within 2 % and 3 %, and the launches and GPU-hours it spends until it is.

Per case (a simulated profile with its discretised space) the oracle evaluates the whole grid once,
noise-free: its best tok/s is the truth every answer is scored against. Each strategy then runs per seed
and per noise regime (GPU-bound and overhead-bound, `benchmarks.noise`) with the same GPU-hour budget
(`budget` times the median cost of one full launch of the grid), every launch measured with that regime's
noise and paid in full. At the end a strategy answers by its own rule on its own noisy measurements; the
answer's *noise-free* tok/s is what counts (`benchmarks.regret`).

Cases come in three sets: the development set (the built-in profiles, and profiles generated from a
development seed), the first held-out set (generated from seed 20261130; its figures have been read, so it
counts as seen), and the second held-out set, generated from a seed picked once for the final table and
run with seeds never used elsewhere: only its rows carry `heldout: true`.
"""

from __future__ import annotations

import logging
import math
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from benchmarks.heldout import generate
from benchmarks.noise import Launcher
from benchmarks.oracle import Oracle
from benchmarks.regret import RunScore, summary_row
from benchmarks.regret import score as score_run
from benchmarks.search_notes import NO_BUDGET, REGIMES, not_leading, pooled_notes, table_rows
from benchmarks.spaces import CASES, BenchCase, case_spec, enumerate_space
from benchmarks.specsweep_runs import strategy as specsweep_strategy
from benchmarks.strategies import BOUNDS, HAS_TORCH, PEERS, SearchRun, Strategy, quiet_optuna
from benchmarks.table import Row
from orchestrator.noise import Regime
from orchestrator.records import ServerConfig
from orchestrator.spec_search import make_config

log = logging.getLogger(__name__)


# How the search benchmark is made, for the top of RESULTS.md (the figures themselves are in the table).
METHOD = """\
## How the search benchmark is made

- **Same start for all.** No strategy gets a known-good configuration or a baseline launch; every one starts
  from nothing. A launch of a configuration already launched is a new launch, paid in full and measured
  anew, for every strategy that makes it (plain TPE launches whatever it proposes, repeats included;
  specsweep's confirmation relaunches are paid the same way). specsweep's driver answers a proposal it has
  already measured from its record without a launch: that costs nothing because nothing runs.
- **Noise where reality has it.** Every launch's stages are the simulated node's noise-free expectation
  times a per-launch factor (log-normal, 7 %: two starts differ by 6-9 % on an H200) and a per-stage factor
  whose spread falls with the stage's length (15 % at 0.3 s, about 3 % at these 20-90 s stages), seeded by
  (seed, configuration, how many times the run launched it), so all strategies see the same draws.
- **Score what the user gets.** Each strategy answers by its own rule on its own noisy measurements: the
  best single draw (grid, auto_benchmark, vllm_auto_tune, random, plain TPE's `best_trial`), or for
  specsweep the confirmation rule (the product has no confirmation phase yet, so the rule is written in
  `benchmarks/confirm.py`: the top 3 relaunched until each has 3 launches, ranked by median). The answer's
  *noise-free* tok/s is scored: right means within 2 % of the grid's true optimum.
- **Pay for time.** A launch costs its start-up from the profile (imports, weights, KV, graph capture,
  server start), an OOM up to its failure, the warm-up and KV probe, the stages that ran and the stop,
  times the node's GPUs. The budget is GPU-hours: 40 times the median cost of one full launch of the grid,
  and at most 120 launches (cheap OOM launches let a strategy make more than 40); a strategy stops once
  it has spent it. specsweep's driver stops at the budget less its confirmation reserve, through the
  product's own time budget. "GPU-h to a right answer" is the GPU time spent until the recommendation
  became right and stayed right to the end; a run whose final answer is wrong counts as the whole
  budget (censored), so a median equal to the budget means at least half of the runs ended wrong. The
  grid has no budget.
- **Held out.** Besides the development cases (the three built-in profiles, and four profiles generated
  from seed 11), four profiles are generated from seed 20261130 (other model sizes and GPU memories, draft
  costs, acceptance curves, both SGLang memory rules, feasible shares aimed at 25/45/65/85 %) and run with
  seeds 900000 and up. Neither those profiles nor those seeds were used while developing: the sampler,
  the confirmation rules and the memory rules were chosen on the development cases only. Held-out rows
  are marked [held-out]; "held-out (all)" pools every held-out (case, seed) run, with GPU time as a share
  of each case's budget.
- `informed_bound` is not a contestant: it is told the three best speculative trees and spends the whole
  budget telling them apart. Its hit rate is the ceiling that the noise puts on any strategy at this budget.
- **specsweep's variants** are the product's driver with one lever changed each (`benchmarks/
  specsweep_runs.py`): `specsweep_bounds` swaps in the learned KV-pressure and draft-ceiling rules
  (`orchestrator/memory_bounds.py`); `specsweep_race` spends half the budget on a race among the top 6
  speculative trees, pooling every launch of a tree whatever its memory flags and dropping the worst mean
  each round; `specsweep_race_bounds` both; `specsweep_no_confirm` answers with the best single draw.
- **Levers tried on the development cases and not kept** (7 cases x seeds 0-9, share of 70 runs right;
  rerun any with `SearchSettings.variants`): the product as it is with the 3 x 3 confirmation 31 %; no
  confirmation 30 %; confirmation only within 12 % of the leader 31 %; top 3 x 5 launches 30 %; top 3
  trees pooled x 3 27 %, x 8 31 %; race among the top 4 trees 41 %, top 8 with 60 % reserve 31 %, top 6
  configurations (not trees) 34 %; TPE with 10 random start-up trials 34 %, ungrouped TPE 24 %; the race
  among the top 6 trees 41 % (and 46 % / 47 % on two further seed sets, against 43 % / 29 % for the
  product as it is), so that one was kept.

**Where specsweep stands, plainly.** It misses the issue's goal on the held-out set (the notes give the
figures): pooled, it is right more often than every peer with the same budget there, but far from 90 %
of seeds; on the development cases, pooled, random search and vLLM's auto_tune are right more often than
the product as it is (the race variant about as often as random search). Its median GPU time
to a right answer is close to the whole budget (at least half of every strategy's runs end wrong, so the
censored medians sit near the budget and "half the best peer's" cannot be met), and most of its studies
have more than one OOM launch. It does not lead on every case (the per-case notes list where a peer with
the same budget is right more often). The exhaustive grid, at 20-50 times the budget, is right more often
than any budgeted strategy: its best single draw among hundreds of feasible configurations is still a
draw, which is why it is not always right either. Why:
- *Telling the top trees apart.* The memory flags barely move the speed; the speculative tree decides,
  and the best two or three trees are 1-3 % apart while one launch moves by about 7 %. On the
  development cases a right configuration was launched in 80 % of the product's runs, but answered in
  about 30 %: the search finds it and the single draws cannot tell it from its neighbours. Racing the
  top trees on pooled launches is the lever that helped most; the informed ceiling shows what a perfect
  choice of which trees to race would reach.
- *OOM launches.* The memory prior (`orchestrator/memory_prior.py`, `prior_model.py`) knows each
  configuration's start-up memory before the first launch (weights and KV bytes per token from the
  models' `config.json`, here the node's profile), including a draft that no longer fits at high
  fractions under SGLang <= 0.5.9 rules, and refuses a KV pool that cannot hold `max_running_requests`
  of the workload's requests (the KV probe's own test) until a launch serves on one. The learned model
  and `orchestrator/memory_bounds.py` stay on top as its correction.
"""


class CaseSet(StrEnum):
    DEV = "development"
    HELDOUT_1 = "held-out 1 (seen)"
    HELDOUT_2 = "held-out 2"


# The second held-out set's generator seed and run seeds: picked once, for the final table only. Nothing
# (sampler, rules, peers' mappings, budgets) may be chosen by looking at its figures.
FINAL_HELDOUT_SEED = 58_213_977
FINAL_HELDOUT_SEED_BASE = 3_100_000


@dataclass(frozen=True)
class SearchSettings:
    budget: int = 40  # GPU-hour budget, in full launches of the median configuration
    seeds: int = 20  # per development case
    cases: tuple[str, ...] = tuple(CASES)
    dev_generated_seed: int = 11
    dev_generated: int = 4
    heldout_seed: int = 20261130  # the first held-out set's generator seed (seen: reported as such)
    heldout_cases: int = 4
    heldout_seeds: int = 20
    heldout_seed_base: int = 900_000
    final_seed: int = FINAL_HELDOUT_SEED
    final_cases: int = 4
    final_seeds: int = 20
    final_seed_base: int = FINAL_HELDOUT_SEED_BASE
    variants: tuple[str, ...] = ("specsweep",)
    regimes: tuple[Regime, ...] = (Regime.GPU_BOUND, Regime.OVERHEAD_BOUND)


def score(
    run: SearchRun,
    truth: dict[ServerConfig, float],
    best: float,
    *,
    censor_h: float,
    censor_launches: int,
) -> RunScore:
    return score_run(run, truth, best, censor_h=censor_h, censor_launches=censor_launches)


class Truth(dict[ServerConfig, float]):
    """Noise-free tok/s by configuration: the grid's, and any other configuration a peer launches (a base
    without speculation) evaluated on demand; 0 for one that does not serve."""

    def __init__(self, oracle: Oracle, grid: dict[ServerConfig, float]) -> None:
        super().__init__(grid)
        self.oracle = oracle

    def __missing__(self, config: ServerConfig) -> float:
        value = self.oracle.evaluate(config).objective or 0.0
        self[config] = value
        return value

    def get(self, config: ServerConfig, default: float | None = None) -> float:  # type: ignore[override]
        return self[config]


@dataclass(frozen=True)
class CaseResult:
    case: BenchCase
    case_set: CaseSet
    configs: int
    feasible_share: float
    best: float
    budget_h: float
    grid_h: float
    scores: dict[tuple[Regime, str], list[RunScore]]


def strategies(settings: SearchSettings) -> dict[str, Strategy]:
    variants = {name: specsweep_strategy(name) for name in settings.variants}
    return {**PEERS, **variants, **BOUNDS}


def optimum(oracle: Oracle, configs: Sequence[ServerConfig], truth: dict[ServerConfig, float]) -> float:
    """The best noise-free tok/s of the space, and of the same memory points without speculation (a peer
    may answer with a base), so that no answer scores better than the optimum."""
    memory = {(c.mem_fraction_static, c.cuda_graph_max_bs, c.max_running_requests) for c in configs}
    bases = [oracle.evaluate(make_config(*m)).objective or 0.0 for m in memory]
    return max([*truth.values(), *bases])


def run_case(
    case: BenchCase, case_set: CaseSet, settings: SearchSettings, seeds: Sequence[int]
) -> CaseResult:
    profile = case.load_profile()
    oracle = Oracle(case_spec(case, gpus=profile.gpu_count), profile)
    configs = enumerate_space(case.space)
    evaluations = [oracle.evaluate(c) for c in configs]
    grid_truth = {e.config: e.objective for e in evaluations if e.objective is not None}
    truth = Truth(oracle, grid_truth)
    best = optimum(oracle, configs, grid_truth)
    typical_s = statistics.median(e.seconds() for e in evaluations if e.objective is not None) * oracle.gpus
    budget_s = settings.budget * typical_s
    grid_h = sum(e.seconds() for e in evaluations) * oracle.gpus / 3600
    scores: dict[tuple[Regime, str], list[RunScore]] = {}
    for regime in settings.regimes:
        for name, strategy in strategies(settings).items():
            t0 = time.perf_counter()
            free = name in NO_BUDGET
            cap = len(configs) if free else 3 * settings.budget
            for seed in seeds:
                launcher = Launcher(
                    oracle, seed, budget_gpu_s=math.inf if free else budget_s, max_launches=cap, regime=regime
                )
                run = strategy(launcher, configs)
                censor = grid_h if free else budget_s / 3600
                scores.setdefault((regime, name), []).append(
                    score(run, truth, best, censor_h=censor, censor_launches=cap)
                )
            log.info("%s %s %s: %.1f s", case.name, regime, name, time.perf_counter() - t0)
    return CaseResult(
        case, case_set, len(configs), len(grid_truth) / len(configs), best, budget_s / 3600, grid_h, scores
    )


def rows_of(res: CaseResult) -> list[dict[str, Any]]:
    out = []
    for (regime, name), runs in res.scores.items():
        out.append(
            summary_row(
                res.case.name,
                REGIMES[regime],
                name,
                res.case_set is CaseSet.HELDOUT_2,
                runs,
                set=res.case_set.value,
                budget_gpu_hours=round(res.grid_h if name in NO_BUDGET else res.budget_h, 4),
                optimum_tok_s=round(res.best, 2),
                feasible_share=round(res.feasible_share, 3),
                configs=res.configs,
            )
        )
    return out


def case_sets(settings: SearchSettings) -> list[tuple[BenchCase, CaseSet, list[int]]]:
    dev = [CASES[n] for n in settings.cases]
    dev += generate(settings.dev_generated_seed, settings.dev_generated, heldout=False)
    seen = generate(settings.heldout_seed, settings.heldout_cases, heldout=False)
    final = generate(settings.final_seed, settings.final_cases, heldout=True)
    dev_seeds = list(range(settings.seeds))
    seen_seeds = [settings.heldout_seed_base + i for i in range(settings.heldout_seeds)]
    final_seeds = [settings.final_seed_base + i for i in range(settings.final_seeds)]
    return (
        [(c, CaseSet.DEV, dev_seeds) for c in dev]
        + [(c, CaseSet.HELDOUT_1, seen_seeds) for c in seen]
        + [(c, CaseSet.HELDOUT_2, final_seeds) for c in final]
    )


def run_search(settings: SearchSettings) -> tuple[list[Row], list[str], list[dict[str, Any]]]:
    quiet_optuna()
    notes: list[str] = []
    rows: list[dict[str, Any]] = []
    for case, case_set, seeds in case_sets(settings):
        t0 = time.perf_counter()
        res = run_case(case, case_set, settings, seeds)
        log.info("search %s: %.1f s", case.name, time.perf_counter() - t0)
        rows += rows_of(res)
        notes.append(
            f"{case.name} [{case_set.value}]: {res.configs} configurations, "
            f"{res.feasible_share:.0%} feasible, optimum {res.best:.1f} tok/s, "
            f"budget {res.budget_h:.2f} GPU-h, the whole grid {res.grid_h:.1f} GPU-h"
            + (f"; {case.why}." if case.why else ".")
        )
    notes[:0] = pooled_notes(rows) + not_leading(rows)
    if not HAS_TORCH:
        notes.append(
            "Optuna's GPSampler (the `gp` peer) needs PyTorch, which this environment does not install: "
            "the peer is in benchmarks/strategies.py and runs wherever PyTorch is importable."
        )
    return table_rows(rows), notes, rows
