"""`python -m benchmarks.run [--quick]`: every benchmark, one table.

Prints the table, writes it as JSON and Markdown under `benchmarks/out/` (the search benchmark's rows
also as `benchmarks/out/search.json`), and, for a full run only, writes `benchmarks/RESULTS.md` (the
latest table with the date, the machine and the command): a `--quick` run never overwrites it. The benchmarks
that need no Ray run first; the local Ray instance and the Ray clusters come last, one at a time.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks.harness.paths import BENCHMARKS, OUT, ROOT
from benchmarks.harness.table import Row, Table
from benchmarks.search.efficiency import METHOD as SEARCH_METHOD
from benchmarks.search.efficiency import SearchSettings, run_search
from benchmarks.search.notes import table_rows
from benchmarks.search.replay import replay_rows
from benchmarks.system.client_ceiling import CeilingSettings, run_ceiling
from benchmarks.system.giveup import GiveUpSettings, run_giveup
from benchmarks.system.overhead import OverheadSettings, run_overhead
from benchmarks.system.scale import ScaleSettings, run_scale
from benchmarks.truth.measured_grid import GRIDS

log = logging.getLogger("benchmarks")
PARTS = ("search", "giveup", "overhead", "ceiling", "scale")  # in their numbers' order


@dataclass(frozen=True)
class Settings:
    search: SearchSettings
    giveup: GiveUpSettings
    ceiling: CeilingSettings
    overhead: OverheadSettings
    scale: ScaleSettings


FULL = Settings(
    SearchSettings(seeds=20, heldout_seeds=20, final_seeds=30),
    GiveUpSettings(repeats=20),
    CeilingSettings(shapes=((128, 64, 1024), (1024, 64, 128))),
    OverheadSettings(trials=100),
    ScaleSettings(nodes=(1, 2, 4, 8), trials=16),
)
QUICK = Settings(
    SearchSettings(
        seeds=4,
        cases=("tight",),
        dev_generated=1,
        heldout_cases=1,
        heldout_seeds=4,
        heldout_seed=12,
        heldout_seed_base=500_000,
        # A quick run never touches the final held-out set: its stand-in is generated from another seed.
        final_seed=13,
        final_cases=1,
        final_seeds=4,
        final_seed_base=600_000,
        real_cases=3,
        real_seeds=2,
    ),
    GiveUpSettings(repeats=3),
    CeilingSettings(shapes=((128, 32, 128), (1024, 32, 32))),
    OverheadSettings(trials=10),
    ScaleSettings(nodes=(1, 2), trials=4),
)


def machine() -> str:
    try:
        return subprocess.run(["uname", "-a"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return " ".join(platform.uname())


def run_all(settings: Settings, parts: Sequence[str], sglang_path: str | None) -> Table:
    table = Table()

    def search() -> tuple[list[Row], list[str]]:
        rows, notes, search_rows = run_search(settings.search)
        # every strategy replayed on each grid measured on real hardware, once it is in the repository
        grid_rows: list[dict[str, Any]] = []
        grid_notes: list[str] = []
        for grid in GRIDS.values():
            more_rows, more_notes = replay_rows(
                grid, seeds=settings.search.seeds, regimes=settings.search.regimes
            )
            grid_rows += more_rows
            grid_notes += more_notes
        table.meta["search_rows"] = search_rows + grid_rows
        return rows + table_rows(grid_rows), notes + grid_notes

    jobs: dict[str, Callable[[], tuple[list[Row], list[str]]]] = {
        "search": search,
        "giveup": lambda: run_giveup(settings.giveup),
        "ceiling": lambda: run_ceiling(settings.ceiling, sglang_path),
        "overhead": lambda: run_overhead(settings.overhead),
        "scale": lambda: run_scale(settings.scale),
    }
    timings: dict[str, float] = {}
    load: dict[str, tuple[float, float]] = {}
    for part in PARTS:
        if part not in parts:
            continue
        log.warning("benchmark %s ...", part)
        t0 = time.monotonic()
        before = os.getloadavg()[0]
        rows, notes = jobs[part]()
        timings[part] = round(time.monotonic() - t0, 1)
        load[part] = (round(before, 2), round(os.getloadavg()[0], 2))
        log.warning("benchmark %s done in %.0f s", part, timings[part])
        table.extend(rows, notes)
    table.meta["seconds_per_benchmark"] = timings
    # Timings are only as good as the machine was quiet: other work on it shows here.
    table.meta["load_average_1min_before_after"] = load
    return table


def results_md(table: Table) -> str:
    meta = table.meta
    head = [
        "# Benchmark results",
        "",
        f"- Date: {meta['date']}",
        f"- Machine: `{meta['uname']}`, {meta['cores']} cores, Python {meta['python']}",
        f"- Command: `{meta['command']}` ({meta['mode']}; took {meta['seconds']:.0f} s: "
        + ", ".join(f"{k} {v:g} s" for k, v in meta["seconds_per_benchmark"].items())
        + ")",
        "- Load average (1 min) before / after each benchmark: "
        + ", ".join(f"{k} {a:g} / {b:g}" for k, (a, b) in meta["load_average_1min_before_after"].items()),
        "",
        "Ratios (x specsweep) are the strategy's figure over specsweep's, same case and metric; they are "
        "given for the search benchmark only. See the notes under the table for how each figure is made "
        "and where specsweep does not lead.",
        "",
    ]
    if "search" in meta["seconds_per_benchmark"]:
        head += [SEARCH_METHOD]
    head += [""]
    return "\n".join(head) + table.markdown()


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__)
    p.add_argument(
        "--quick",
        action="store_true",
        help="small settings, about two minutes on two cores; writes only under --out, never RESULTS.md",
    )
    p.add_argument("--only", nargs="+", choices=PARTS, default=list(PARTS), help="run only these benchmarks")
    p.add_argument("--out", type=Path, default=OUT, help="where results.json and results.md go")
    p.add_argument("--results-md", type=Path, default=BENCHMARKS / "RESULTS.md", help="the committed summary")
    p.add_argument("--no-results-md", action="store_true", help="do not rewrite the committed summary")
    p.add_argument(
        "--sglang-path",
        default=None,
        help="a folder holding an unpacked sglang wheel, to try importing its bench_serving from",
    )
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s")
    for noisy in ("alembic", "mlflow", "optuna", "ray"):
        logging.getLogger(noisy).setLevel(logging.ERROR)
    # Ray and the trial workers import `benchmarks` and `orchestrator` from the repository root.
    root = str(ROOT)
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH", "")]))
    t0 = time.monotonic()
    settings = QUICK if args.quick else FULL
    table = run_all(settings, args.only, args.sglang_path)
    table.meta.update(
        date=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        uname=machine(),
        cores=os.cpu_count(),
        python=platform.python_version(),
        command="python -m benchmarks.run" + "".join(f" {shlex.quote(a)}" for a in (argv or sys.argv[1:])),
        mode="quick" if args.quick else "full",
        seconds=round(time.monotonic() - t0, 1),
    )
    search_rows = table.meta.pop("search_rows", None)
    print(table.text())
    args.out.mkdir(parents=True, exist_ok=True)
    if search_rows is not None:
        (args.out / "search.json").write_text(json.dumps(search_rows, indent=1) + "\n")
    (args.out / "results.json").write_text(table.dumps() + "\n")
    (args.out / "results.md").write_text(results_md(table))
    # A quick run is a smoke test: the committed summary only ever holds a full run.
    write_md = not args.no_results_md and not args.quick
    if write_md:
        args.results_md.write_text(results_md(table))
    print(f"wrote {args.out}/" + (f" and {args.results_md}" if write_md else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
