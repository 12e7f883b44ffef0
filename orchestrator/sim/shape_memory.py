"""A simulated profile that names its models' config.json takes its memory figures from them.

The figures come from the same arithmetic the memory prior uses (`orchestrator.footprint.shape`), so the
simulator and the prior cannot drift apart silently: a profile states the model, not numbers fitted by
hand. Paths are taken as given, else relative to the repository root (``trials/models/...``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from orchestrator.footprint.shape import load_shape

REPO_ROOT = Path(__file__).resolve().parents[2]


def _resolve(path: str) -> Path:
    p = Path(path)
    return p if p.is_absolute() or p.exists() else REPO_ROOT / p


def derive_memory(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with the memory figures it does not state derived, when it names ``model_shape``."""
    ref = data.get("model_shape")
    if not ref:
        return data
    if not isinstance(ref, dict) or "target" not in ref:
        raise ValueError("model_shape: give a mapping with 'target' (and 'draft') config.json folders")
    tp = int(data.get("gpu_count", 1))
    target = load_shape(_resolve(str(ref["target"])))
    derived: dict[str, Any] = {}
    out = derived
    # Per GPU at the node's tp, stored as the sum over the GPUs (what the profile's fields mean).
    out["target_weights_gib"] = target.weights_gib(tp, first_load=True) * tp
    out["target_kv_bytes_per_token"] = target.kv_bytes_per_token(1)
    out["target_kv_layout"] = "mla" if target.mla else "mha"
    out["target_kv_sharded"] = not target.mla
    out["target_kv_heads"] = target.kv_heads
    out["vocab_size"] = target.vocab
    out["target_arch"] = target.architecture
    if ref.get("draft"):
        draft = load_shape(_resolve(str(ref["draft"])))
        out["draft_weights_gib"] = draft.weights_gib(tp, first_load=False) * tp
        out["draft_weights_sharded"] = True
        out["draft_kv_bytes_per_token"] = draft.kv_bytes_per_token(1)
        out["draft_kv_sharded"] = True
        out["draft_kv_heads"] = draft.kv_heads
        out["draft_arch"] = draft.architecture
    # A value the profile (or a mapping based on it) states itself wins: a what-if profile may change
    # one figure of a named model.
    return {**derived, **data}
