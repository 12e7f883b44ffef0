"""What a start-up memory account's figures add up to, for the words and rows that show it.

SGLang's log gives free memory at a few points (before the weights, after them, after the KV pools, at
the end) and what some steps took (weights, pools, graph captures). Which steps lie between two points
depends on the version: SGLang <= 0.5.9 loads the draft's weights and pool after the target's graphs, so
"free after the weights" is after the target's alone. Whatever a step took that has no figure of its own
(attention and cuBLAS workspaces, the pool's own overhead) is the remainder, derived here, so that a
sentence or a table never names figures that do not add up.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

TOLERANCE_GB = 0.03  # the log prints two decimals: sums of rounded figures drift by a few hundredths


@dataclass(frozen=True)
class MemoryWalk:
    """A start-up account's figures (GiB, the log's `*_gb` names), and what lies between them."""

    figures: Mapping[str, float]

    def get(self, name: str) -> float | None:
        return self.figures.get(name)

    @property
    def draft_late(self) -> bool | None:
        """Whether the draft's weights (and pool) came after "free after the weights" was read: True when
        that figure is the start less the target's weights alone, False when less both; None unknown."""
        start, target = self.get("avail_at_start_gb"), self.get("weights_gb")
        draft, after = self.get("draft_weights_gb"), self.get("avail_after_weights_gb")
        if start is None or target is None or not draft or after is None:
            return None
        if abs(start - target - after) <= TOLERANCE_GB:
            return True
        if abs(start - target - draft - after) <= TOLERANCE_GB:
            return False
        return None

    @property
    def pool_rest(self) -> float | None:
        """What the KV pool step took besides the pools' K and V: free after the weights, less the pools
        allocated before the graphs, less free after the KV pools."""
        after_w, kv, after_kv = (
            self.get(n) for n in ("avail_after_weights_gb", "kv_cache_gb", "avail_after_kv_gb")
        )
        if after_w is None or kv is None or after_kv is None:
            return None
        draft_kv = 0.0 if self.draft_late else (self.get("draft_kv_cache_gb") or 0.0)
        return round(after_w - kv - draft_kv - after_kv, 2)

    @property
    def late_draft_gb(self) -> float:
        """The draft's weights and pool, when they came after the target's graphs (else 0)."""
        if not self.draft_late:
            return 0.0
        return round((self.get("draft_weights_gb") or 0.0) + (self.get("draft_kv_cache_gb") or 0.0), 2)

    @property
    def startup_rest(self) -> float | None:
        """What start-up took after the KV pools besides the graph captures (and the draft's late weights
        and pool): free after the KV pools, less those, less free at the end."""
        after_kv, end = self.get("avail_after_kv_gb"), self.get("avail_end_gb")
        if after_kv is None or end is None:
            return None
        graphs = (self.get("graph_gb") or 0.0) + (self.get("draft_graph_gb") or 0.0)
        return round(after_kv - graphs - self.late_draft_gb - end, 2)

    @property
    def rest_words(self) -> str:
        """What "the rest of start-up" after the KV pools holds, in words."""
        late = ", and the draft's weights and KV pool" if self.draft_late else ""
        return f"attention and cuBLAS workspaces{late}"
