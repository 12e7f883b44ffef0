"""The search benchmark's table and the notes above it: the goal, the levers, who is not leading.

Rows are the dicts ``search.summary`` and ``search.pooled`` build, one per strategy and case.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from benchmarks.strategies import PEERS
from benchmarks.table import Row, ratio

BENCH = "1 search efficiency"
REFERENCE = "specsweep"
NO_BUDGET = ("grid",)  # the exhaustive grid runs everything: it is the reference, not a contestant


def _shown(row: dict[str, Any]) -> str:
    hits = round(row["hit_rate"] * row["seeds"])
    extra = f" ({100 * row['budget_share_median']:.0f} % of budget)" if "budget_share_median" in row else ""
    return (
        f"{hits}/{row['seeds']} right; {row['gpu_hours_median']:.2f} GPU-h{extra}; "
        f"OOM {row['oom_launches_median']:g} (max {row['oom_launches_max']})"
    )


def table_rows(rows: Sequence[dict[str, Any]]) -> list[Row]:
    out: list[Row] = []
    ref = {r["case"]: r for r in rows if r["strategy"] == REFERENCE}
    for r in rows:
        key = "budget_share_median" if "budget_share_median" in r else "gpu_hours_median"
        base = ref.get(r["case"])
        out.append(
            Row(
                BENCH,
                r["case"] + (" [held-out]" if r["heldout"] else ""),
                r["strategy"],
                "right / GPU-h to a right answer (median) / OOM launches (median)",
                r["hit_rate"],
                _shown(r),
                ratio(r[key], base[key]) if base else None,
            )
        )
    return out


def goal_note(rows: Sequence[dict[str, Any]]) -> list[str]:
    """The issue's goal on the held-out set, checked plainly for specsweep and each of its variants."""
    held = {r["strategy"]: r for r in rows if r["case"] == "held-out (all)"}
    peers = [r for name, r in held.items() if name in PEERS and name not in NO_BUDGET]
    if not peers:
        return ["Goal: no held-out rows in this run."]
    best_peer = min(peers, key=lambda r: (r["budget_share_median"], -r["hit_rate"]))
    top_peer = max(peers, key=lambda r: r["hit_rate"])
    notes = []
    for name, ours in held.items():
        if not name.startswith(REFERENCE):
            continue
        hit_ok = ours["hit_rate"] >= 0.9
        cost_ok = ours["budget_share_median"] <= 0.5 * best_peer["budget_share_median"]
        oom_ok = ours["studies_over_one_oom"] == 0
        notes.append(
            f"Goal on the held-out set for {name} (right in >= 90 % of seeds, <= half the GPU-hours of the "
            f"best peer, <= 1 OOM launch per study): right in {ours['hit_rate']:.0%} "
            f"({'met' if hit_ok else 'missed'}; the most accurate peer, {top_peer['strategy']}, "
            f"{top_peer['hit_rate']:.0%}); median GPU time to a right answer "
            f"{100 * ours['budget_share_median']:.0f} % of the budget against the best peer's "
            f"({best_peer['strategy']}) {100 * best_peer['budget_share_median']:.0f} % "
            f"({'met' if cost_ok else 'missed'}); {ours['studies_over_one_oom']:.0%} of its studies had "
            f"more than one OOM launch, median {ours['oom_launches_median']:g}, at most "
            f"{ours['oom_launches_max']} ({'met' if oom_ok else 'missed'})."
        )
    bound = held.get("informed_bound")
    if bound is not None:
        notes.append(
            f"Ceiling: a strategy told the three best speculative trees in advance, spending the whole "
            f"budget on them and answering with the best median, is right in {bound['hit_rate']:.0%} of "
            "the held-out runs (row informed_bound)"
            + (
                ": with 6-9 % between launches and the top trees 1-3 % apart, this budget cannot tell them "
                "apart in 90 % of runs, whatever the search."
                if bound["hit_rate"] < 0.9
                else "."
            )
        )
    return notes


def lever_notes(rows: Sequence[dict[str, Any]]) -> list[str]:
    """What each measured lever did, from the pooled rows (development and held-out side by side)."""
    pooled_rows = {(r["case"], r["strategy"]): r for r in rows if r["case"].endswith("(all)")}

    def fig(strategy: str) -> str:
        parts = []
        for label in ("development (all)", "held-out (all)"):
            r = pooled_rows.get((label, strategy))
            if r is not None:
                parts.append(
                    f"{label.split()[0]} {r['hit_rate']:.0%} right, OOM launches median "
                    f"{r['oom_launches_median']:g}"
                )
        return "; ".join(parts)

    names = sorted({s for _, s in pooled_rows if s.startswith(REFERENCE)})
    if len(names) < 2:
        return []
    return ["Levers, pooled: " + " | ".join(f"{n}: {fig(n)}" for n in names) + "."]


def not_leading(rows: Sequence[dict[str, Any]]) -> list[str]:
    """Each case where a peer is right more often than specsweep, said plainly."""
    notes = []
    by_case: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_case.setdefault(r["case"], []).append(r)
    for case, group in by_case.items():
        ours = next((r for r in group if r["strategy"] == REFERENCE), None)
        if ours is None:
            continue
        ahead = [
            r
            for r in group
            if r["strategy"] in PEERS and r["strategy"] not in NO_BUDGET and r["hit_rate"] > ours["hit_rate"]
        ]
        if ahead:
            held = " [held-out]" if ours["heldout"] else ""
            notes.append(
                f"{case}{held}: specsweep does not lead (right in {ours['hit_rate']:.0%}): "
                + ", ".join(f"{r['strategy']} {r['hit_rate']:.0%}" for r in ahead)
                + "."
            )
    return notes
