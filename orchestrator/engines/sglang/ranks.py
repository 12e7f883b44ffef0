"""Each tensor-parallel rank's own start-up figures, from the rank tags of an SGLang log.

With `--tp-size N` every scheduler prints its lines with its own tag (`[... TP0]` to `[... TPn]`), in
whatever order the ranks get there. The memory account is read from rank 0 (the figures are per GPU and
the ranks agree); this keeps what every rank printed, so that a report can show each GPU and a rank
that disagrees or dies first is visible.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from orchestrator.engines.logrecords import RankFigures
from orchestrator.engines.sglang import sglang_lines as shapes

# The launcher names the rank whose scheduler died: `Rank 1 scheduler is dead`, `Rank 0 scheduler died
# during initialization (exit code: -9)`.
RANK_DIED = re.compile(r"Rank (\d+) scheduler (?:is dead|died)")


@dataclass
class _Acc:
    avail_at_start_gb: float | None = None
    weights_gb: list[float] = field(default_factory=list)
    kv_cache_tokens: list[int] = field(default_factory=list)
    avail_end_gb: float | None = None
    lines: int = 0


def tp_rank(tags: dict[str, str]) -> int | None:
    """The TP rank of a tagged line of the first data-parallel replica; None for the launcher's lines."""
    if "TP" not in tags or tags.get("DP", "0") != "0":
        return None
    return int(tags["TP"])


class RankFigureReader:
    """Fed every rank-tagged line; keeps each rank's figures apart."""

    def __init__(self) -> None:
        self._ranks: dict[int, _Acc] = {}

    def feed(self, rank: int, msg: str) -> None:
        acc = self._ranks.setdefault(rank, _Acc())
        acc.lines += 1
        if m := shapes.WEIGHT_BEGIN.match(msg):
            if acc.avail_at_start_gb is None:
                acc.avail_at_start_gb = float(m.group(1))
        elif m := shapes.WEIGHT_END.match(msg):
            acc.weights_gb.append(float(m.group("usage")))
        elif m := shapes.KV.match(msg):
            acc.kv_cache_tokens.append(int(m.group("tokens")))
        elif shapes.MAX_TOTAL.match(msg) and (g := shapes.AVAILABLE_GPU_MEM.search(msg)):
            acc.avail_end_gb = float(g.group(1))

    def figures(self) -> tuple[RankFigures, ...]:
        return tuple(
            RankFigures(
                rank,
                a.avail_at_start_gb,
                tuple(a.weights_gb),
                tuple(a.kv_cache_tokens),
                a.avail_end_gb,
                a.lines,
            )
            for rank, a in sorted(self._ranks.items())
        )
