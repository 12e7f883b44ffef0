"""Replaying every strategy on a grid measured on real hardware: which finds the grid's best within 2 %,
in how many launches.

The grid answers as an oracle (`benchmarks.truth.measured_grid.ReplayOracle`: the truth is the measured
objective of each cell, the best of the replayed space the optimum). Each grid of the registry
(`measured_grid.GRIDS`) is replayed under its regimes' spread (`benchmarks.launches.noisy`): the H200 8B
grid GPU-bound (0.5 % launch to launch, 1 % per stage, what the 8B shape measured), the real pair
(`real_pair`, SmolLM2-135M and its EAGLE-3 draft, twelve trees on one H100) overhead-bound, as its launches
on another H100 measured (8.4 % launch to launch), and GPU-bound as the optimistic case; its first grid
(`real_pair_machines`, over five H100s) under both too. A grid still partial is replayed on its largest
complete part (`MeasuredGrid.replayed`), said in the notes. A strategy that launches a configuration the
grid did not measure (SGLang's auto_benchmark starts with bases without speculation at memory flags the
grid did not measure) cannot be replayed, and is reported as such rather than given invented figures.

`python -m benchmarks.search.replay [--grid real_pair] [--regime overhead_bound] [--seeds 20]` prints, per
regime and strategy, its regret, its share within 2 % and its median launches and GPU-hours to 2 %
(`FOLDER` and `--spec` replay another study folder as the chosen grid's); `--markdown` prints the grid's
rows and notes as `benchmarks.run` writes them into RESULTS.md. A grid that measured the server without
speculation at its space's own memory flags (`MeasuredGrid.with_baseline`: the real pair) is replayed twice:
the speculative space alone, and the user's question, that baseline in the optimum and specsweep as it
ships (rows "with the baseline").
"""

from __future__ import annotations

import argparse
import logging
import math
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from benchmarks.harness.paths import ROOT
from benchmarks.harness.quiet import quiet_optuna
from benchmarks.harness.table import Table, median
from benchmarks.launches.noisy import Launcher
from benchmarks.peers.registry import BOUNDS
from benchmarks.search.efficiency import SearchSettings, Truth, strategies
from benchmarks.search.notes import REGIMES, table_rows, where_not_leading
from benchmarks.search.regret import RunScore, score, summary_row
from benchmarks.search.specsweep import strategy as specsweep_strategy
from benchmarks.truth.measured_grid import GRIDS, MeasuredGrid, ReplayOracle, Unmeasured, measured_bases
from orchestrator.driver.answer.noise import Regime

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReplayResult:
    strategy: str
    runs: list[RunScore]
    error: str = ""  # why it could not be replayed
    # final answers outside the replayed space (a base without speculation), by label: how many runs
    outside: dict[str, int] = field(default_factory=dict)


def replay(
    grid: MeasuredGrid = GRIDS["h200_8b"],
    *,
    seeds: int = 20,
    budget: int = 8,
    regime: Regime = Regime.GPU_BOUND,
    with_baseline: bool = False,
) -> tuple[float, list[ReplayResult]]:
    """Every strategy on the measured grid under `regime`, `seeds` times, each with `budget` median
    launches' GPU time. Returns the replayed space's best (measured) and each strategy's runs.

    `with_baseline`: the user's question rather than the speculative space's alone. The truth then holds
    the server without speculation at the space's memory flags too (measured, as the search benchmark's
    optimum holds the bases, `efficiency.optimum`), and specsweep runs as it ships, its baseline first;
    the peers search the same space as before and may answer with a base where they launch one."""
    quiet_optuna()
    # The 8B grid's dummy draft accepts nothing, and every tree of the real pair is slower than its
    # baseline: the product says so at ERROR on every replayed study; the replay knows it and reports
    # figures, not that.
    logging.getLogger("orchestrator.driver").setLevel(logging.CRITICAL)
    replayed = grid.replayed()
    oracle, configs = replayed.oracle, replayed.configs
    # The truth is the best of the searched space (each configuration by the cell that answers for it: its
    # own where the grid measured it, else the measured cell of the same server, graph bs 64 under max
    # running 16 the bs-16 figure); the no-speculation baseline (measured beside it) is not in it, and is
    # reported on its own (`MeasuredGrid.baseline_note`).
    measured = {c: e.objective for c in configs if (e := oracle.evaluate(c)).objective is not None}
    bases = measured_bases(oracle, configs) if with_baseline else {}
    measured |= bases
    best = max(measured.values())
    truth = Truth(oracle, measured)
    budget_s = budget_gpu_s(oracle, budget)
    results = []
    for name, strategy in strategies(SearchSettings()).items():
        if name == "specsweep" and not with_baseline:
            # the truth here is speculative only (above): specsweep without its baseline
            strategy = specsweep_strategy("specsweep_no_baseline")
        cap = len(configs) if name == "grid" else 3 * budget
        runs: list[RunScore] = []
        outside: dict[str, int] = {}
        try:
            for seed in range(seeds):
                launcher = Launcher(
                    oracle,
                    seed,
                    budget_gpu_s=math.inf if name == "grid" else budget_s,
                    max_launches=cap,
                    regime=regime,
                )
                # a bound is told the best configurations of the truth it is scored on, the bases included
                run = strategy(launcher, [*configs, *bases] if name in BOUNDS else configs)
                runs.append(score(run, truth, best, censor_h=budget_s / 3600, censor_launches=cap))
                answer = run.launches[-1].recommend if run.launches else None
                if answer is not None and answer not in measured:
                    outside[answer.label()] = outside.get(answer.label(), 0) + 1
        except Unmeasured as err:
            results.append(ReplayResult(name, [], str(err)))
            continue
        results.append(ReplayResult(name, runs, outside=outside))
    return best, results


def budget_gpu_s(oracle: ReplayOracle, launches: float) -> float:
    """The GPU time every strategy is given on a grid: ``launches`` of its median measured launch."""
    typical = statistics.median(e.seconds() for e in oracle.measured.values() if e.objective is not None)
    return launches * typical * oracle.gpus


def replay_rows(
    grid: MeasuredGrid = GRIDS["h200_8b"],
    *,
    seeds: int = 20,
    budget: int = 8,
    regimes: Sequence[Regime] | None = None,
) -> tuple[list[dict[str, Any]], list[str]]:
    """The replay under each of the grid's regimes (those of them in `regimes`, when given) as search.json
    rows (the grid's case and set), and its notes: a strategy that cannot be replayed, answers outside the
    replayed space, a partial grid, the baseline without speculation, where specsweep does not lead; no
    rows and a note while the grid's records are not in the repository."""
    head = f"Replay of {grid.case}"
    if not (grid.folder / "records").is_dir():
        where = grid.folder.relative_to(ROOT) if grid.folder.is_relative_to(ROOT) else grid.folder
        return [], [f"{head}: no measured grid at {where} yet."]
    rows: list[dict[str, Any]] = []
    notes: list[str] = []
    for regime in grid.regimes:
        if regimes is not None and regime not in regimes:
            continue
        for view in grid.views():
            case = grid.view_case(view)
            best, results = replay(grid, seeds=seeds, budget=budget, regime=regime, with_baseline=view)
            rows += [
                summary_row(
                    case,
                    REGIMES[regime],
                    r.strategy,
                    False,
                    r.runs,
                    set=grid.set,
                    optimum_tok_s=round(best, 2),
                )
                for r in results
                if r.runs
            ]
            notes += [
                f"Replay of {case} ({REGIMES[regime]}): {r.strategy} is not replayable: {r.error}."
                for r in results
                if r.error
            ]
            notes += [
                f"Replay of {case} ({REGIMES[regime]}): {r.strategy} answered {sum(r.outside.values())} of "
                f"{len(r.runs)} runs outside the replayed space ({', '.join(r.outside)}), each scored by its "
                "measured value (a regret of 0 where that is above the space's best)."
                for r in results
                if r.outside
            ]
    if partial := grid.replayed().note():
        notes.append(f"{head}: {partial}.")
    if base := grid.baseline_note():
        notes.append(f"{head}: {base}.")
    notes += where_not_leading(rows)
    return rows, notes


def report(best: float, results: Sequence[ReplayResult], notes: Sequence[str] = ()) -> str:
    lines = [f"replayed space's best (measured): {best:.1f} tok/s", *notes, ""]
    lines.append(
        "strategy         seeds  regret mean %  within 2 %  launches to 2 % (median)  GPU-h to 2 % (median)  "
        "OOM (median)"
    )
    for r in results:
        if r.error:
            lines.append(f"{r.strategy:<16} not replayable: {r.error}")
            continue
        lines.append(
            f"{r.strategy:<16} {len(r.runs):<6} {100 * statistics.fmean(x.regret for x in r.runs):<14.2f} "
            f"{sum(x.right for x in r.runs) / len(r.runs):<11.0%} "
            f"{median([x.launches_to_2pct for x in r.runs]):<25g} "
            f"{median([x.gpu_h_to_2pct for x in r.runs]):<22.3f} "
            f"{median([float(x.oom_launches) for x in r.runs]):g}"
        )
        if r.outside:
            answers = ", ".join(f"{label} in {k}" for label, k in r.outside.items())
            lines.append(
                f"{'':<16} answered outside the replayed space (scored by its measured value): {answers}"
            )
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.search.replay", description=__doc__)
    p.add_argument("folder", nargs="?", type=Path, default=None, help="a study folder instead of the grid's")
    p.add_argument("--grid", choices=list(GRIDS), default="h200_8b", help="the measured grid to replay")
    p.add_argument("--spec", type=Path, default=None, help="a spec instead of the grid's")
    p.add_argument(
        "--regime",
        choices=[REGIMES[r] for r in Regime],
        action="append",
        help="the launches' spread (repeatable; default: the grid's regimes)",
    )
    p.add_argument("--seeds", type=int, default=20)
    p.add_argument("--budget", type=int, default=8, help="GPU-hour budget in median launches")
    p.add_argument(
        "--markdown",
        action="store_true",
        help="print the grid's rows and notes as benchmarks.run writes them into RESULTS.md (its regimes)",
    )
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    if args.seeds < 1 or args.budget < 1:
        print("error: --seeds and --budget must be at least 1", file=sys.stderr)
        return 2
    grid = GRIDS[args.grid]
    grid = replace(grid, folder=args.folder or grid.folder, spec=args.spec or grid.spec)
    by_name = {v: k for k, v in REGIMES.items()}
    regimes = [by_name[r] for r in args.regime] if args.regime else list(grid.regimes)
    try:
        if args.markdown:
            rows, notes = replay_rows(grid, seeds=args.seeds, budget=args.budget)
            table = Table()
            table.extend(table_rows(rows), notes)
            print(table.markdown(), end="")
            return 0
        replayed = grid.replayed()
        notes = [n for n in (replayed.note(), grid.baseline_note()) if n]
        for regime in regimes:
            for view in grid.views():
                best, results = replay(
                    grid, seeds=args.seeds, budget=args.budget, regime=regime, with_baseline=view
                )
                print(f"{grid.view_case(view)} [{grid.set}, {REGIMES[regime]}]")
                print(report(best, results, notes))
    except (FileNotFoundError, Unmeasured) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
