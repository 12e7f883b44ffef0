"""Benchmark 1, search efficiency on noisy launches: how far each strategy's answer is from the optimum
(regret), how often it is within 2 % and 3 %, and the launches and GPU-hours it spends until it is.

Per case (a simulated profile with its discretised space) the oracle evaluates the whole grid once,
noise-free: its best tok/s is the truth every answer is scored against. Each strategy then runs per seed
and per noise regime (GPU-bound and overhead-bound, `benchmarks.launches.noisy`) with the same GPU-hour budget
(`budget` times the median cost of one full launch of the grid), every launch measured with that regime's
noise and paid in full. At the end a strategy answers by its own rule on its own noisy measurements; the
answer's *noise-free* tok/s is what counts (`benchmarks.search.regret`).

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

from benchmarks.harness.quiet import quiet_optuna
from benchmarks.harness.table import Row
from benchmarks.launches.noisy import Launcher
from benchmarks.launches.run_record import Strategy
from benchmarks.peers.registry import BOUNDS, HAS_TORCH, PEERS
from benchmarks.search.model_error import notes as model_error_notes
from benchmarks.search.notes import NO_BUDGET, REGIMES, pooled_notes, table_rows, where_not_leading
from benchmarks.search.regret import RunScore, score, summary_row
from benchmarks.search.specsweep import strategy as specsweep_strategy
from benchmarks.truth.cases import CASES, BenchCase, case_spec
from benchmarks.truth.generated import generate
from benchmarks.truth.oracle import Oracle
from benchmarks.truth.real_derived import REAL_CASES, real_derived_cases
from orchestrator.driver.answer.noise import Regime
from orchestrator.driver.search.space import space_configs
from orchestrator.records import ServerConfig
from orchestrator.spec.search import make_config

log = logging.getLogger(__name__)


# How the search benchmark is made, for the top of RESULTS.md (the figures themselves are in the table).
METHOD = """\
## How the search benchmark is made

- **Same start for all.** No strategy gets a known-good configuration; every one starts from nothing.
  specsweep runs as it ships: its first launch is the server without speculation (`budget.baseline`,
  on by default), paid from its budget like any launch, as auto_benchmark's base stage is; either may
  answer "serve without speculation". A launch of a configuration already launched is a new launch, paid
  in full and measured anew, for every strategy that makes it. (The H200 grid's replay scores speculative
  configurations only, and runs specsweep without its baseline launch.)
- **Two noise regimes, every case in both** (`benchmarks/launches/noisy.py`, figures from the H200
  measurements of SGLang 0.5.17). *GPU-bound* (`gpu_bound`, what users serve; measured on a
  Llama-3-8B-shaped model): every launch multiplies its stages by one log-normal factor of 0.5 % (three
  launches differed by 0.3-0.7 %) and each stage by its own 1 %. *Overhead-bound* (`overhead_bound`, the
  tiny test models): 7 % per launch (two starts differ by 6-9 %) and a per-stage spread that falls with
  the stage's length (15 % at 0.3 s, about 3 % at these 20-90 s stages). Draws are seeded by (seed,
  configuration, how many times the run launched it), so all strategies see the same draws.
- **Peers as their users run them** (`benchmarks/peers/`: `auto_benchmark.py` and `vllm_auto_tune.py` cite the
  files they follow and give the flag mapping). SGLang's `auto_benchmark`
  (`python/sglang/auto_benchmark_lib.py`) at its default tier 2: a base stage without speculation (SGLang's
  defaults, then the full product of the first three flags, three values each, at most 8 candidates), then a
  speculative stage on the best base (at most 8 trees); it answers with the best single record of both stages.
  vLLM's `auto_tune.sh` (`benchmarks/auto_tune/auto_tune.sh`): the memory fraction stepped down from the
  highest at or under 0.98 until a server with the largest batch flags starts, then every max running requests
  x graph batch size at that fraction, one fixed tree (it tunes no speculation); it answers with the best
  throughput. Random search (no configuration twice) and Optuna's plain TPE (`best_trial`) answer with their
  best single draw. specsweep is the product's own driver (`benchmarks/search/specsweep.py`) with its own
  answer. They stop when their plan is done or the budget is spent, whichever comes first: auto_benchmark's
  plan is at most 16 launches and can end well inside the budget.
- **Regret, not a cliff** (`benchmarks/search/regret.py`). A run's regret is (true optimum - true value of its
  answer) / optimum, the optimum being the best noise-free configuration of the space (or of the same
  memory points without speculation, which auto_benchmark may answer with); no answer is a regret of
  100 %. Per case x regime x strategy: mean, median, p90 and max regret, the share within 2 % and 3 %,
  launches and GPU-hours until the answer first reached regret <= 2 % and kept it to the end (medians;
  a run that never got there counts as its whole budget, its launch cap and its GPU-hours, so a median at
  the budget means at least half the runs ended outside 2 %), and OOM launches. Paired comparisons put
  specsweep against each peer on the same (case, seed) runs: the difference in mean regret and in the
  share within 2 %, with a 95 % bootstrap interval resampling the (case, seed) pairs (2000 draws).
- **Pay for time.** A launch costs its start-up from the profile, an OOM up to its failure, the warm-up and
  KV probe, the stages that ran and the stop, times the node's GPUs. The budget is GPU-hours: 40 times the
  median cost of one full launch of the grid, and at most 120 launches. The grid has no budget.
- **Three sets of cases.** Development: the three built-in profiles and four generated from seed 11.
  Held-out 1 (seed 20261130, run seeds 900000 and up): its figures were read while the product changed,
  so it is reported as seen (`heldout: false`, `set: "held-out 1 (seen)"`). Held-out 2: four profiles
  generated from seed 58213977 and run with seeds 3100000 and up, picked once for the final table and
  used for nothing else (`heldout: true`); a `--quick` run never touches it (its stand-in is seed 13).
- `informed_bound` is not a contestant: it is told the three best speculative trees by true value (each
  with its best memory flags, whatever their distance from the optimum) and spends the whole budget
  telling them apart, answering with the best median: the ceiling that noise puts on a strategy that
  still has to tell the top trees apart.
- **Real-grid replay** (`benchmarks/search/replay.py`, the grids of `benchmarks/truth/measured_grid.py`): a
  grid measured on real hardware answers as the oracle: the truth is the measured objective (a cell
  launched more than once by its mean), the optimum the best of the replayed space. Two grids. The H200 8B
  grid (`trials/h200-8b-grid.yaml`, records under `tests/fixtures/sglang/0.5.17/llama8b-grid/`, set
  "real grid"), its draws with the GPU-bound spread; cells SGLang makes the same server (graph bs 64 or 256
  under max running 16 captures graphs up to 16 only) answer with the measured graph-bs-16 cell. The real
  pair (set "real_pair": SmolLM2-135M-Instruct and an EAGLE-3 draft trained for it): its grid on one H100
  (`trials/smollm2-grid12.yaml`, records under `tests/fixtures/sglang/0.5.17/smollm2-grid12-h100/`), twelve
  trees (steps {1, 2, 4, 6} x top-k {1, 4, 8}, each at its widest draft up to 16) at fixed memory flags,
  replayed overhead-bound (one launch of the pair moved by 8.4 % on another H100) and GPU-bound (the
  optimistic case); and its first grid (`trials/smollm2-h200-grid.yaml`, `smollm2-chat-h100/`), 16 trees
  over five H100s whose hosts differ by 47-58 %, so that a cell's truth is partly its machine's. Each
  measured the server without speculation at those same flags, so it is replayed as two questions: the
  trees alone (which tree is fastest, specsweep without its baseline), and the user's (rows "with the
  baseline": that server in the optimum, specsweep as it ships, its baseline first).
  While a grid is partial the replay searches its largest complete part (the largest product of the
  spec's choices all measured; the notes say how many of the space's configurations are measured). A
  strategy that launches a configuration not measured is reported as not replayable; one that answers
  with a measured configuration outside the replayed space (auto_benchmark's base without speculation)
  is scored by its measured value, said in the notes. `python -m benchmarks.search.replay --grid NAME`.
- **Real-derived set** (`benchmarks/truth/real_derived.py`, `set: "real_derived"`): truth from outside the
  search. The decode steps of 12 trees and of the server without speculation, measured on one H200
  (the Llama-3-8B shape with dummy weights at concurrency 8 and 32, `trials/h200-8b-trees.yaml`, records in
  `tests/fixtures/sglang/0.5.17/llama8b-trees*/`), with the accept lengths that nine public tables printed
  for those trees (`tests/fixtures/acceptance/published.yaml`, each row with its source): no acceptance
  drawn from the policy's family, no step from its cost form. Between the measured batches the step is
  interpolated; a tree that was not both measured and published is not in any case's space. Run seeds
  4200000 and up; nothing in the product was tuned on this set.
- Print the regret tables and the paired comparisons from `benchmarks/out/search.json` with
  `python -m benchmarks.search.regret`.
"""


class CaseSet(StrEnum):
    DEV = "development"
    HELDOUT_1 = "held-out 1 (seen)"
    HELDOUT_2 = "held-out 2"
    HELDOUT_2_STAND_IN = "held-out 2 stand-in"  # a quick run's: another seed's cases, never the final set's
    REAL_DERIVED = "real_derived"  # measured H200 steps x published acceptance (truth.real_derived)


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
    real_cases: int = len(REAL_CASES)  # the first N real-derived cases (0: none)
    real_seeds: int = 20
    real_seed_base: int = 4_200_000
    variants: tuple[str, ...] = ("specsweep",)
    regimes: tuple[Regime, ...] = (Regime.GPU_BOUND, Regime.OVERHEAD_BOUND)


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
    configs = space_configs(case.space)
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
                res.case_set in (CaseSet.HELDOUT_2, CaseSet.HELDOUT_2_STAND_IN),
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
    final_set = CaseSet.HELDOUT_2 if settings.final_seed == FINAL_HELDOUT_SEED else CaseSet.HELDOUT_2_STAND_IN
    real = real_derived_cases()[: settings.real_cases]
    real_seeds = [settings.real_seed_base + i for i in range(settings.real_seeds)]
    return (
        [(c, CaseSet.DEV, dev_seeds) for c in dev]
        + [(c, CaseSet.HELDOUT_1, seen_seeds) for c in seen]
        + [(c, final_set, final_seeds) for c in final]
        + [(c, CaseSet.REAL_DERIVED, real_seeds) for c in real]
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
    notes[:0] = pooled_notes(rows) + where_not_leading(rows)
    if settings.real_cases:
        # What the policy's own model gets wrong where its family is not the truth (search.model_error)
        notes += model_error_notes(real_derived_cases()[: settings.real_cases], min(settings.real_seeds, 10))
    if not HAS_TORCH:
        notes.append(
            "Optuna's GPSampler (the `gp` peer) needs PyTorch, which this environment does not install: "
            "the peer is in benchmarks/peers/optuna_samplers.py and runs wherever PyTorch is importable."
        )
    return table_rows(rows), notes, rows
