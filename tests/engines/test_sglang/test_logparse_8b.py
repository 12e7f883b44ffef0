"""The parser on real start-ups of a GPU-bound model: the Llama-3-8B shape with dummy weights on one H200
(fixtures/sglang/0.5.17/"llama8b-h200"), at fractions 0.10-0.98 and CUDA-graph bs 16 and 256."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.engines.sglang.logparse import parse_log
from orchestrator.records import FailureKind, FailureStage

FOLDER = Path(__file__).resolve().parents[2] / "fixtures" / "sglang" / "0.5.17" / "llama8b-h200"

# file: KV tokens, target KV GB (K + V), draft KV GB, target graphs GB, draft graphs GB, GB left at the end
READY = {
    "f50b16.log": (416063, 50.78, 1.58, 0.13, 0.13, 70.48),
    "f50b256.log": (416063, 50.78, 1.58, 1.42, 0.87, 68.46),
    "f85b16.log": (803065, 98.04, 3.06, 0.13, 0.13, 21.74),
    "f85b256.log": (803065, 98.04, 3.06, 1.42, 0.87, 19.71),
    "f95b16.log": (913637, 111.52, 3.48, 0.13, 0.13, 7.81),
    "f95b256.log": (913637, 111.52, 3.48, 1.42, 0.87, 5.77),
    "f96b256s4k2d8.log": (924694, 112.88, 3.52, 2.71, 1.80, 2.13),
    "f97b256s4k2d8.log": (935752, 114.22, 3.56, 2.71, 1.80, 0.84),
}


@pytest.mark.parametrize("name", sorted(READY))
def test_a_ready_8b_start_up_gives_its_whole_memory_account(name: str) -> None:
    report = parse_log((FOLDER / name).read_text(encoding="utf-8"))
    tokens, kv, draft_kv, graph, draft_graph, left = READY[name]
    m = report.memory
    assert report.ready and report.failure is None
    assert (m.avail_at_start_gb, m.weights_gb, m.draft_weights_gb) == (139.09, 14.98, 2.14)
    assert m.kv_cache_tokens == m.draft_kv_cache_tokens == tokens
    assert (m.kv_cache_gb, m.draft_kv_cache_gb) == pytest.approx((kv, draft_kv))
    assert (m.graph_gb, m.draft_graph_gb, m.avail_end_gb) == pytest.approx((graph, draft_graph, left))


def test_the_8b_pool_is_what_the_static_fraction_leaves_after_the_weights() -> None:
    # SGLang sizes the pools as avail_at_start x fraction - (memory the weights took): both pools
    # together, to within the 0.01 GB the log prints.
    for name, (_, kv, draft_kv, *_rest) in READY.items():
        fraction = int(name[1:3]) / 100
        m = parse_log((FOLDER / name).read_text(encoding="utf-8")).memory
        assert m.avail_at_start_gb is not None and m.avail_after_weights_gb is not None
        static = m.avail_at_start_gb * fraction - (m.avail_at_start_gb - m.avail_after_weights_gb)
        assert kv + draft_kv == pytest.approx(static, abs=0.1), name


def test_the_8b_kv_floor_names_its_own_minimum_fraction() -> None:
    report = parse_log((FOLDER / "kvfloor010.log").read_text(encoding="utf-8"))
    assert report.failure is not None
    assert (report.failure.stage, report.failure.kind) == (FailureStage.KV_ALLOCATION, FailureKind.OOM)
    assert "minimum viable = 1 - available/pre = 0.1237" in report.failure.message
    assert report.memory.kv_cache_tokens is None  # it never got that far


def test_the_8b_draft_graph_oom_is_a_draft_capture_oom_after_the_target_graphs() -> None:
    report = parse_log((FOLDER / "f98b256s4k2d8.log").read_text(encoding="utf-8"))
    assert report.failure is not None
    assert (report.failure.stage, report.failure.kind) == (FailureStage.DRAFT_GRAPH_CAPTURE, FailureKind.OOM)
    assert report.memory.graph_gb == pytest.approx(2.71)  # the s4k2d8 verify graphs at bs 256 fit
