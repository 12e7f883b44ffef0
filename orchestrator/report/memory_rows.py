"""The rows of the report's memory account: the log's figures, each named for what it is, and the two
remainders no line of the log names (`driver.search.memory_walk`), so that the rows add up."""

from __future__ import annotations

from collections.abc import Mapping

from orchestrator.driver.search.memory_walk import MemoryWalk

# What the memory figures of a trial mean; a figure not named here is still shown, without a note.
MEMORY_NOTES = {
    "avail_at_start_gb": "free GPU memory before the weights",
    "weights_gb": "target weights",
    "draft_weights_gb": "draft weights",
    "avail_after_weights_gb": "free after the weights",
    "kv_cache_tokens": "KV pool capacity, target",
    "kv_cache_gb": "KV pool (K + V), target",
    "draft_kv_cache_tokens": "KV pool capacity, draft",
    "draft_kv_cache_gb": "KV pool (K + V), draft",
    "avail_after_kv_gb": "free after the KV pools",
    "graph_gb": "CUDA graphs, target (all its captures: prefill, decode or verify)",
    "draft_graph_gb": "CUDA graphs, draft (all its captures: prefill, decode, extend)",
    "avail_end_gb": "free once ready: the headroom for activations",
    "max_total_num_tokens": "tokens SGLang settled on (max_total_num_tokens)",
}
# As the draft loads after the target's graphs (SGLang <= 0.5.9): the figures then mean this.
LATE_DRAFT_NOTES = {
    "draft_weights_gb": "draft weights, loaded after the target's KV pool and graphs",
    "avail_after_weights_gb": "free after the target's weights (the draft's load later)",
    "draft_kv_cache_gb": "KV pool (K + V), draft, allocated after the target's graphs",
    "avail_after_kv_gb": "free after the target's KV pool",
}
EARLY_DRAFT_NOTES = {"avail_after_weights_gb": "free after the target's and the draft's weights"}
POOL_REST = "kv_pool_rest"
STARTUP_REST = "startup_rest"


def base_name(key: str) -> str:
    """best.json's `*_gib` as the log's `*_gb`, the names the notes and the walk use."""
    return key.removesuffix("_gib") + "_gb" if key.endswith("_gib") else key


def account_rows(memory: Mapping[str, float]) -> list[tuple[str, float, str]]:
    """(name, value, what it is) in the log's order, the remainders each after the figure it ends at."""
    walk = MemoryWalk({base_name(k): v for k, v in memory.items()})
    notes = dict(MEMORY_NOTES)
    if walk.draft_late:
        notes |= LATE_DRAFT_NOTES
    elif walk.draft_late is False:
        notes |= EARLY_DRAFT_NOTES
    pools = "the target's KV pool" if walk.draft_late else "the KV pools"
    unit = "_gib" if any(k.endswith("_gib") for k in memory) else "_gb"  # best.json's names, or the log's
    rows = []
    for key, value in memory.items():
        name = base_name(key)
        rows.append((key, value, notes.get(name, "")))
        if name == "avail_after_kv_gb" and (rest := walk.pool_rest) is not None:
            rows.append(
                (
                    POOL_REST + unit,
                    rest,
                    f"taken with {pools} besides K and V (derived: free after the weights - {pools} - "
                    "free after them)",
                )
            )
        if name == "avail_end_gb" and (rest := walk.startup_rest) is not None:
            late = " - the draft's weights and KV pool" if walk.draft_late else ""
            rows.append(
                (
                    STARTUP_REST + unit,
                    rest,
                    f"the rest of start-up after {pools}, besides the rows above: attention and cuBLAS "
                    f"workspaces (derived: free after {pools} - CUDA graphs{late} - free once ready)",
                )
            )
    return rows
