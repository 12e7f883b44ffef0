"""Regret: how far each answer is from the optimum, per run, per case, and specsweep against each peer.

A run's *regret* is (true optimum - true value of its answer) / optimum: 0 for the best configuration,
1 for no answer at all. Per case x regime x strategy the summary gives the mean, median, 90th percentile
and maximum regret, the share of runs within 2 % and within 3 %, the launches and GPU-hours until the
answer first reached regret <= 2 % and kept it to the end (medians; a run that never got there, or lost
it, counts as its whole budget: its launch cap and its GPU-hour budget, so a median equal to the budget
means at least half the runs ended outside 2 %), and the OOM launches.

Paired comparisons put specsweep and one peer on the same (case, seed) runs: the difference in mean regret
and in the share within 2 %, with a 95 % bootstrap interval that resamples the (case, seed) pairs.

`python -m benchmarks.search.regret [search.json]` prints the tables (both regimes, development and held-out)
and the paired comparisons from the rows `python -m benchmarks.run --only search` wrote.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.harness.paths import OUT
from benchmarks.harness.table import median, quantile
from benchmarks.launches.run_record import SearchRun
from orchestrator.records import ServerConfig

REFERENCE = "specsweep"
HIT = 0.02  # within 2 % of the optimum
NEAR = 0.03
BOOTSTRAP = 2000
DEFAULT_FILE = OUT / "search.json"


@dataclass(frozen=True)
class RunScore:
    """One strategy's run in one seed, scored against the noise-free truth."""

    seed: int
    regret: float  # (optimum - true value of the final answer) / optimum; 1.0 without an answer
    launches_to_2pct: float  # launches until regret <= 2 % for good; the launch cap when never
    gpu_h_to_2pct: float  # the same in GPU-hours; the GPU-hour budget when never
    oom_launches: int
    launches: int
    spent_h: float
    confirm_launches: int = 0

    @property
    def right(self) -> bool:
        return self.regret <= HIT + 1e-12

    @property
    def near(self) -> bool:
        return self.regret <= NEAR + 1e-12


def regret_of(config: ServerConfig | None, truth: dict[ServerConfig, float], best: float) -> float:
    """0 for the optimum (or an answer outside the space that beats it: auto_benchmark's product can
    launch a tree the space leaves out), 1 for no answer."""
    return 1.0 if config is None else max(0.0, (best - truth.get(config, 0.0)) / best)


def score(
    run: SearchRun,
    truth: dict[ServerConfig, float],
    best: float,
    *,
    censor_h: float,
    censor_launches: int,
) -> RunScore:
    """Score a run: its final answer's regret, and when its answer got within 2 % for good."""
    spent = 0.0
    since: tuple[int, float] | None = None  # (launches, GPU-s) at the start of the last right stretch
    for i, lc in enumerate(run.launches, 1):
        spent += lc.gpu_s
        since = since or (i, spent) if regret_of(lc.recommend, truth, best) <= HIT + 1e-12 else None
    final = run.launches[-1].recommend if run.launches else None
    regret = regret_of(final, truth, best)
    ok = since is not None and regret <= HIT + 1e-12
    return RunScore(
        seed=run.seed,
        regret=regret,
        launches_to_2pct=float(since[0]) if ok and since else float(censor_launches),
        gpu_h_to_2pct=since[1] / 3600 if ok and since else censor_h,
        oom_launches=sum(lc.status.infeasible for lc in run.launches),
        launches=len(run.launches),
        spent_h=spent / 3600,
        confirm_launches=run.confirm_launches,
    )


def summary_row(
    case: str, regime: str, strategy: str, heldout: bool, runs: Sequence[RunScore], **extra: Any
) -> dict[str, Any]:
    """One row of search.json: the keys the issue names, then the per-run figures the paired comparisons
    and the pooled tables are made from."""
    regrets = [r.regret for r in runs]
    return {
        "case": case,
        "regime": regime,
        "strategy": strategy,
        "heldout": heldout,
        "seeds": len(runs),
        "regret_mean": round(100 * statistics.fmean(regrets), 3),
        "regret_median": round(100 * median(regrets), 3),
        "regret_p90": round(100 * quantile(regrets, 0.9), 3),
        "regret_max": round(100 * max(regrets), 3),
        "hit_2pct": round(sum(r.right for r in runs) / len(runs), 4),
        "hit_3pct": round(sum(r.near for r in runs) / len(runs), 4),
        "launches_to_2pct_median": median([r.launches_to_2pct for r in runs]),
        "gpu_hours_to_2pct_median": round(median([r.gpu_h_to_2pct for r in runs]), 4),
        "oom_launches_median": median([float(r.oom_launches) for r in runs]),
        "oom_launches_max": max(r.oom_launches for r in runs),
        "launches_median": median([float(r.launches) for r in runs]),
        "gpu_hours_spent_median": round(median([r.spent_h for r in runs]), 4),
        **extra,
        "runs": [
            {
                "seed": r.seed,
                "regret": round(r.regret, 6),
                "launches_to_2pct": r.launches_to_2pct,
                "gpu_hours_to_2pct": round(r.gpu_h_to_2pct, 5),
                "oom_launches": r.oom_launches,
            }
            for r in runs
        ],
    }


# -- paired comparisons -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Paired:
    """specsweep minus a peer on the same (case, seed) runs: negative regret and positive hit share are
    specsweep ahead."""

    peer: str
    regime: str
    case_set: str
    pairs: int
    regret_diff: float  # percentage points of mean regret
    regret_ci: tuple[float, float]
    hit_diff: float  # share within 2 %
    hit_ci: tuple[float, float]


def set_of(row: dict[str, Any]) -> str:
    """The row's set of cases: development, the seen held-out set, or the final held-out set."""
    return str(row.get("set") or ("held-out" if row["heldout"] else "development"))


def _pairs(
    rows: Sequence[dict[str, Any]], peer: str, regime: str, case_set: str
) -> list[tuple[float, float]]:
    def runs(strategy: str) -> dict[tuple[str, int], float]:
        return {
            (r["case"], run["seed"]): float(run["regret"])
            for r in rows
            if r["strategy"] == strategy and r["regime"] == regime and set_of(r) == case_set
            for run in r.get("runs", [])
        }

    ours, theirs = runs(REFERENCE), runs(peer)
    return [(ours[k], theirs[k]) for k in sorted(ours.keys() & theirs.keys())]


def _interval(values: Sequence[float]) -> tuple[float, float]:
    return quantile(values, 0.025), quantile(values, 0.975)


def paired(
    rows: Sequence[dict[str, Any]], peer: str, regime: str, case_set: str, *, seed: int = 0
) -> Paired | None:
    pairs = _pairs(rows, peer, regime, case_set)
    if not pairs:
        return None

    def stats(sample: Sequence[tuple[float, float]]) -> tuple[float, float]:
        d_regret = statistics.fmean(a - b for a, b in sample)
        d_hit = statistics.fmean(float(a <= HIT + 1e-12) - float(b <= HIT + 1e-12) for a, b in sample)
        return 100 * d_regret, d_hit

    rng = random.Random(seed)
    draws = [stats([pairs[rng.randrange(len(pairs))] for _ in pairs]) for _ in range(BOOTSTRAP)]
    regret_diff, hit_diff = stats(pairs)
    return Paired(
        peer,
        regime,
        case_set,
        len(pairs),
        regret_diff,
        _interval([d[0] for d in draws]),
        hit_diff,
        _interval([d[1] for d in draws]),
    )


# -- printing ---------------------------------------------------------------------------------------------


def pooled(
    rows: Sequence[dict[str, Any]], strategy: str, regime: str, case_set: str
) -> dict[str, Any] | None:
    """Every (case, seed) run of a set counted once."""
    group = [r for r in rows if r["strategy"] == strategy and r["regime"] == regime and set_of(r) == case_set]
    runs = [run for r in group for run in r.get("runs", [])]
    if not runs:
        return None
    regrets = [float(run["regret"]) for run in runs]
    return {
        "strategy": strategy,
        "seeds": len(runs),
        "regret_mean": 100 * statistics.fmean(regrets),
        "regret_p90": 100 * quantile(regrets, 0.9),
        "regret_max": 100 * max(regrets),
        "hit_2pct": sum(x <= HIT + 1e-12 for x in regrets) / len(regrets),
        "hit_3pct": sum(x <= NEAR + 1e-12 for x in regrets) / len(regrets),
        "oom_launches_median": median([float(run["oom_launches"]) for run in runs]),
    }


def _fmt_row(cells: Sequence[str], widths: Sequence[int]) -> str:
    return "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True))


def tables(rows: Sequence[dict[str, Any]]) -> str:
    """The regret tables per regime and set (every case, then the set pooled) and the paired comparisons."""
    out: list[str] = []
    strategies = list(dict.fromkeys(r["strategy"] for r in rows))
    head = ["case", "strategy", "seeds", "regret mean %", "p90 %", "max %", "<=2 %", "<=3 %",
            "launches to 2 %", "GPU-h to 2 %", "OOM"]  # fmt: skip
    for regime in dict.fromkeys(r["regime"] for r in rows):
        for label in dict.fromkeys(set_of(r) for r in rows):
            group = [r for r in rows if r["regime"] == regime and set_of(r) == label]
            if not group:
                continue
            out.append(f"\n## {regime}, {label} cases (censored runs count as the budget)\n")
            body = [
                [r["case"], r["strategy"], str(r["seeds"]), f"{r['regret_mean']:.2f}",
                 f"{r['regret_p90']:.2f}", f"{r['regret_max']:.2f}", f"{r['hit_2pct']:.0%}",
                 f"{r['hit_3pct']:.0%}",
                 f"{r['launches_to_2pct_median']:g}", f"{r['gpu_hours_to_2pct_median']:.2f}",
                 f"{r['oom_launches_median']:g}"]
                for r in group
            ]  # fmt: skip
            for name in strategies:
                p = pooled(rows, name, regime, label)
                if p is not None:
                    body.append(
                        [f"{label} (all)", name, str(p["seeds"]), f"{p['regret_mean']:.2f}",
                         f"{p['regret_p90']:.2f}", f"{p['regret_max']:.2f}", f"{p['hit_2pct']:.0%}",
                         f"{p['hit_3pct']:.0%}", "", "", f"{p['oom_launches_median']:g}"]
                    )  # fmt: skip
            widths = [max(len(c) for c in col) for col in zip(head, *body, strict=True)]
            out += [_fmt_row(head, widths), _fmt_row(["-" * w for w in widths], widths)]
            out += [_fmt_row(b, widths) for b in body]
    out.append("\n## Paired: specsweep minus peer, same (case, seed) runs, 95 % bootstrap interval\n")
    out.append("(negative regret difference and positive hit difference: specsweep ahead)\n")
    out += [describe(c) for c in comparisons(rows)]
    return "\n".join(out) + "\n"


def comparisons(rows: Sequence[dict[str, Any]]) -> list[Paired]:
    found: list[Paired] = []
    peers = [s for s in dict.fromkeys(r["strategy"] for r in rows) if s != REFERENCE]
    for regime in dict.fromkeys(r["regime"] for r in rows):
        for case_set in dict.fromkeys(set_of(r) for r in rows):
            for peer in peers:
                p = paired(rows, peer, regime, case_set)
                if p is not None:
                    found.append(p)
    return found


def describe(p: Paired) -> str:
    def signed(x: float, unit: str) -> str:
        return f"{x:+.2f}{unit}"

    return (
        f"{p.regime}, {p.case_set}, vs {p.peer} ({p.pairs} pairs): mean regret "
        f"{signed(p.regret_diff, ' pp')} [{p.regret_ci[0]:+.2f}, {p.regret_ci[1]:+.2f}]; within 2 % "
        f"{signed(100 * p.hit_diff, ' pp')} [{100 * p.hit_ci[0]:+.1f}, {100 * p.hit_ci[1]:+.1f}]"
        + ("" if _excludes_zero(p) else " (the regret interval holds 0: no clear difference in regret)")
    )


def _excludes_zero(p: Paired) -> bool:
    lo, hi = p.regret_ci
    return (lo > 0 or hi < 0) and not math.isnan(lo)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.search.regret", description=__doc__)
    parser.add_argument("path", nargs="?", type=Path, default=DEFAULT_FILE, help="search.json to read")
    args = parser.parse_args(argv)
    if not args.path.is_file():
        print(
            f"error: {args.path} not found; write it with `python -m benchmarks.run --only search`",
            file=sys.stderr,
        )
        return 2
    rows = json.loads(args.path.read_text())
    print(tables(rows), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
