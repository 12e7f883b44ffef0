"""Replaying every strategy on a grid measured on real hardware: which finds the grid's best within 2 %,
in how many launches.

The grid answers as an oracle (`benchmarks.truth.measured_grid.ReplayOracle`: the truth is the measured
objective of each cell). The launches are drawn with the GPU-bound regime's spread
(`benchmarks.launches.noisy`: 0.5 % launch to launch, 1 % per stage, what the 8B shape measured). A
strategy that launches a configuration the grid did not measure (SGLang's auto_benchmark starts with bases
without speculation at memory flags the grid did not measure) cannot be replayed, and is reported as such
rather than given invented figures.

`python -m benchmarks.search.replay FOLDER [--spec trials/h200-8b-grid.yaml]` prints, per strategy, its
regret, its share within 2 % and its median launches to 2 %.
"""

from __future__ import annotations

import argparse
import logging
import math
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.harness.paths import ROOT
from benchmarks.harness.quiet import quiet_optuna
from benchmarks.harness.table import median
from benchmarks.launches.noisy import Launcher
from benchmarks.search.efficiency import SearchSettings, Truth, strategies
from benchmarks.search.regret import RunScore, score, summary_row
from benchmarks.search.specsweep import strategy as specsweep_strategy
from benchmarks.truth.measured_grid import (
    GRID_FOLDER,
    GRID_SPEC,
    ReplayOracle,
    Unmeasured,
    baseline_note,
    load_records,
    same_start,
)
from orchestrator.driver.answer.noise import Regime
from orchestrator.driver.search.space import space_configs
from orchestrator.spec.sweep_spec import load_spec

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReplayResult:
    strategy: str
    runs: list[RunScore]
    error: str = ""  # why it could not be replayed


def replay(
    folder: Path, spec_path: Path = GRID_SPEC, *, seeds: int = 20, budget: int = 8
) -> tuple[float, list[ReplayResult]]:
    """Every strategy on the measured grid, `seeds` times, each with `budget` median launches' GPU time.
    Returns the grid's best (measured) and each strategy's runs."""
    quiet_optuna()
    # The grid's dummy draft accepts nothing: the product says so (broken speculation) at ERROR on every
    # replayed study; the replay knows it and reports figures, not that.
    logging.getLogger("orchestrator.driver").setLevel(logging.CRITICAL)
    spec = same_start(load_spec(spec_path))
    oracle = ReplayOracle(spec, load_records(folder))
    # the spec's whole space: a cell SGLang makes the same server as a measured one is a configuration a
    # strategy can propose, launched (and drawn) on its own
    configs = space_configs(spec.search)
    # The truth is the best of the searched space; the no-speculation baseline (measured beside it) is
    # not in it, and is reported on its own (`baseline_tok_s`).
    measured = {
        c: e.objective
        for c, e in oracle.measured.items()
        if e.objective is not None and c.speculative_num_steps is not None
    }
    best = max(measured.values())
    # an answer is scored by its measured cell (graph bs 256 under max running 16: the bs-16 figure)
    truth = Truth(oracle, measured)
    typical = statistics.median(e.seconds() for e in oracle.measured.values() if e.objective is not None)
    budget_s = budget * typical * oracle.gpus
    results = []
    for name, strategy in strategies(SearchSettings()).items():
        if name == "specsweep":  # the truth here is speculative only (above): specsweep without its baseline
            strategy = specsweep_strategy("specsweep_no_baseline")
        cap = len(configs) if name == "grid" else 3 * budget
        runs: list[RunScore] = []
        try:
            for seed in range(seeds):
                launcher = Launcher(
                    oracle,
                    seed,
                    budget_gpu_s=math.inf if name == "grid" else budget_s,
                    max_launches=cap,
                    regime=Regime.GPU_BOUND,
                )
                run = strategy(launcher, configs)
                runs.append(score(run, truth, best, censor_h=budget_s / 3600, censor_launches=cap))
        except Unmeasured as err:
            results.append(ReplayResult(name, [], str(err)))
            continue
        results.append(ReplayResult(name, runs))
    return best, results


REPLAY_CASE = "h200-8b-grid (measured)"
REPLAY_SET = "real grid"


def replay_rows(
    folder: Path = GRID_FOLDER, spec_path: Path = GRID_SPEC, *, seeds: int = 20, budget: int = 8
) -> tuple[list[dict[str, Any]], list[str]]:
    """The replay as search.json rows (GPU-bound, set "real grid"), and a note per strategy that cannot be
    replayed; no rows and a note while the measured grid is not in the repository."""
    if not (folder / "records").is_dir():
        where = folder.relative_to(ROOT) if folder.is_relative_to(ROOT) else folder
        return [], [f"Real-grid replay: no measured grid at {where} yet."]
    best, results = replay(folder, spec_path, seeds=seeds, budget=budget)
    rows = [
        summary_row(
            REPLAY_CASE, "gpu_bound", r.strategy, False, r.runs, set=REPLAY_SET, optimum_tok_s=round(best, 2)
        )
        for r in results
        if r.runs
    ]
    notes = [f"Real-grid replay: {r.strategy} is not replayable: {r.error}." for r in results if r.error]
    if base := baseline_note(folder):
        notes.append(f"Real-grid replay: {base}.")
    return rows, notes


def report(best: float, results: Sequence[ReplayResult], note: str = "") -> str:
    lines = [f"grid's best (measured): {best:.1f} tok/s", *([note] if note else []), ""]
    lines.append("strategy         seeds  regret mean %  within 2 %  launches to 2 % (median)  OOM (median)")
    for r in results:
        if r.error:
            lines.append(f"{r.strategy:<16} not replayable: {r.error}")
            continue
        lines.append(
            f"{r.strategy:<16} {len(r.runs):<6} {100 * statistics.fmean(x.regret for x in r.runs):<14.2f} "
            f"{sum(x.right for x in r.runs) / len(r.runs):<11.0%} "
            f"{median([x.launches_to_2pct for x in r.runs]):<25g} "
            f"{median([float(x.oom_launches) for x in r.runs]):g}"
        )
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.search.replay", description=__doc__)
    p.add_argument("folder", nargs="?", type=Path, default=GRID_FOLDER, help="the measured study folder")
    p.add_argument("--spec", type=Path, default=GRID_SPEC, help="the grid's spec")
    p.add_argument("--seeds", type=int, default=20)
    p.add_argument("--budget", type=int, default=8, help="GPU-hour budget in median launches")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    if args.seeds < 1 or args.budget < 1:
        print("error: --seeds and --budget must be at least 1", file=sys.stderr)
        return 2
    try:
        best, results = replay(args.folder, args.spec, seeds=args.seeds, budget=args.budget)
    except FileNotFoundError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(report(best, results, baseline_note(args.folder)), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
