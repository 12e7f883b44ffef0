"""Replaying every strategy on a grid measured on real hardware: which finds the grid's best within 2 %,
in how many launches.

A measured grid is a product study folder (its `records/*.json`, the driver's `TrialRecord`s, one per
launch) of a spec whose space is small enough to launch whole (`trials/h200-8b-grid.yaml`: 3 fractions x
graph batch {16, 64, 256} x max running {16, 256}, one fixed tree, plus the same server without
speculation). `ReplayOracle` answers each configuration with what was measured: the truth is the measured
objective (the mean over repeated launches of one cell), its stages, start-up and wall time are the
record's, and a failed start is the record's failure. The launches are drawn with the GPU-bound regime's
spread (`benchmarks.noise`: 0.5 % launch to launch, 1 % per stage, what the 8B shape measured).

Cells equal by SGLang's own rule answer with the measured cell: a server captures CUDA graphs only up to
`max_running_requests`, so graph bs 64 or 256 under max running 16 is the graph-bs-16 server. A measured
cell is always used as measured (the grid measures one such pair to check the rule). A configuration
neither measured nor equal to a measured one raises `Unmeasured`: a strategy that launches it (SGLang's
auto_benchmark starts with bases without speculation at memory flags the grid did not measure) cannot be
replayed, and is reported as such rather than given invented figures.

`python -m benchmarks.replay FOLDER [--spec trials/h200-8b-grid.yaml]` prints, per strategy, its regret,
its share within 2 % and its median launches to 2 %.
"""

from __future__ import annotations

import argparse
import logging
import math
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pydantic

from benchmarks.noise import Launcher
from benchmarks.oracle import STOP_S, Evaluation, Oracle
from benchmarks.regret import RunScore, score, summary_row
from benchmarks.search import SearchSettings, Truth, strategies
from benchmarks.spaces import DEMO_SPEC
from benchmarks.specsweep_runs import strategy as specsweep_strategy
from benchmarks.strategies import quiet_optuna
from benchmarks.table import median
from orchestrator.driver.answer.noise import Regime
from orchestrator.driver.search.space import space_configs
from orchestrator.records import MemoryAccount, ServerConfig, TrialRecord
from orchestrator.sim.profile import load_profile
from orchestrator.spec.sweep_spec import SweepSpec, load_spec

log = logging.getLogger(__name__)
ROOT = Path(__file__).resolve().parents[1]
GRID_SPEC = ROOT / "trials" / "h200-8b-grid.yaml"
GRID_FOLDER = ROOT / "tests" / "fixtures" / "sglang" / "0.5.17" / "llama8b-grid"
PROFILE = "h200-llama8b"  # SGLang's defaults for the peers: the simulated profile of the same node
_ADAPTER: pydantic.TypeAdapter[TrialRecord] = pydantic.TypeAdapter(TrialRecord)


class Unmeasured(LookupError):
    """A configuration the grid did not measure and no measured cell stands for."""


def load_records(folder: Path) -> list[TrialRecord]:
    """Every launch's record of a study folder (`FOLDER/records/*.json`, or the folder itself), and of the
    repeat study kept beside it (`FOLDER/repeat/records`: cells launched a second time, whose mean is
    then the cell's truth)."""
    where = folder / "records" if (folder / "records").is_dir() else folder
    paths = sorted(where.glob("*.json"))
    if not paths:
        raise FileNotFoundError(f"{where}: no records (*.json); give a study folder with records/")
    paths += sorted((folder / "repeat" / "records").glob("*.json"))
    return [_ADAPTER.validate_json(p.read_bytes()) for p in paths]


def _evaluation(records: Sequence[TrialRecord]) -> Evaluation:
    """One cell: the first record's launch, its stages scaled so that the best stage is the mean measured
    objective of the cell's launches (the truth)."""
    first = records[0].result
    objectives = [r.objective for r in records if r.objective is not None]
    stages = first.stages
    if objectives and first.stages:
        truth = statistics.fmean(objectives)
        best = max(s.output_tok_per_s for s in first.stages if s.completed > 0)
        stages = tuple(replace(s, output_tok_per_s=s.output_tok_per_s * truth / best) for s in first.stages)
    startup = first.startup_s or 0.0
    stage_s = sum(s.duration_s for s in stages)
    return Evaluation(
        config=first.config,
        status=first.status,
        failure=first.failure,
        stages=stages if first.status.value == "ok" else (),
        memory=first.memory or MemoryAccount(),
        resolved_args=first.resolved_args,
        startup_s=startup if first.startup_s is not None else first.wall_s,
        pre_stage_s=max(0.0, first.wall_s - startup - stage_s - STOP_S) if first.startup_s else 0.0,
        stop_s=STOP_S,
        accept_length=first.server_accept_length,
    )


class ReplayOracle(Oracle):
    """An oracle that answers with a measured grid instead of the simulated node's model."""

    def __init__(self, spec: SweepSpec, records: Sequence[TrialRecord]) -> None:
        super().__init__(spec, load_profile(PROFILE))
        cells: dict[ServerConfig, list[TrialRecord]] = {}
        for r in records:
            cells.setdefault(r.result.config, []).append(r)
        self.measured = {config: _evaluation(rs) for config, rs in cells.items()}

    def cell(self, config: ServerConfig) -> ServerConfig:
        """The measured cell that answers for `config`: itself, or the server SGLang makes of it."""
        if config in self.measured:
            return config
        capped = replace(config, cuda_graph_max_bs=min(config.cuda_graph_max_bs, config.max_running_requests))
        if capped in self.measured:
            return capped
        raise Unmeasured(f"{config.label()} was not measured, and no measured cell is the same server")

    def evaluate(self, config: ServerConfig) -> Evaluation:
        return replace(self.measured[self.cell(config)], config=config)


def same_start(grid: SweepSpec) -> SweepSpec:
    """The grid's spec as every strategy gets it: the grid enqueued its cells as known-good
    configurations, launched the baseline and confirmed nothing; a replayed search starts from nothing
    and keeps the demo's confirmation (the product as shipped), like every other case."""
    demo = load_spec(DEMO_SPEC)
    return grid.model_copy(
        update={"known_good": [], "budget": demo.budget.model_copy(update={"baseline": False})}
    )


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


def baseline_note(folder: Path) -> str:
    """What the same server measured without speculation (the grid's dummy draft accepts nothing)."""
    base = [
        r.objective
        for r in load_records(folder)
        if r.objective is not None and r.result.config.speculative_num_steps is None
    ]
    if not base:
        return ""
    return (
        f"without speculation the same server measured {statistics.fmean(base):.1f} tok/s: the grid's draft "
        "(dummy weights) accepts nothing, so no speculative cell beats it; the search scores the speculative "
        "space, where the memory flags decide"
    )


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
    p = argparse.ArgumentParser(prog="python -m benchmarks.replay", description=__doc__)
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
