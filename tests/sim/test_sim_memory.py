"""The start-up memory model against the real H200 run and the users' Kimi-K2.5 case."""

from __future__ import annotations

import json

import pytest
from simhelp import KIMI, TINY, plan, spec

from orchestrator.footprint.sglang_defaults import capture_sizes
from orchestrator.records import FailureStage
from orchestrator.sim.memory import OomKind, StepKind

TINY_RUN = [*spec(3, 1, 4), "--cuda-graph-max-bs", "16", "--max-running-requests", "16"]
KIMI_TP = ["--tp-size", "8"]


def _kv(p, role):  # type: ignore[no-untyped-def]
    return next(s for s in p.steps if s.kind is StepKind.KV and s.role == role)


def test_tiny_profile_reproduces_the_real_h200_start() -> None:
    _, p = plan(TINY, *TINY_RUN, "--mem-fraction-static", "0.85")
    assert p.failure is None
    assert p.free_at_start == pytest.approx(139.09, abs=0.01)  # "Load weight begin. avail mem=139.09 GB"
    assert p.kv_tokens == pytest.approx(12_379_562, rel=1e-3)
    target, draft = _kv(p, "target"), _kv(p, "draft")
    assert target.kv_k == pytest.approx(47.22, abs=0.02) and draft.kv_k == pytest.approx(11.81, abs=0.02)
    assert target.avail_after == pytest.approx(44.39, abs=0.03)
    assert draft.avail_after == pytest.approx(20.78, abs=0.03)
    assert p.final_avail == pytest.approx(19.45, abs=0.1)  # "available_gpu_mem=19.45 GB"
    graphs = {s.name: s.usage for s in p.steps if s.kind is StepKind.GRAPH}
    assert graphs["target prefill"] == pytest.approx(0.31) and graphs["draft prefill"] == pytest.approx(0.26)
    assert graphs["target verify"] == pytest.approx(0.06, abs=0.01)
    assert list(p.capture_sizes) == [1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16]


def test_tiny_kv_failure_names_the_minimum_viable_fraction() -> None:
    _, p = plan(TINY, *TINY_RUN, "--mem-fraction-static", "0.0001")
    assert p.failure is not None
    assert p.failure.kind is OomKind.KV_VALUE_ERROR and p.failure.stage is FailureStage.KV_ALLOCATION
    assert round(p.failure.min_viable, 4) == 0.0018  # the real log's "minimum viable = ... = 0.0018"
    assert not any(s.kind is StepKind.KV for s in p.steps)


@pytest.mark.parametrize(
    ("fraction", "kind", "tokens", "tried_mib"),
    [
        ("0.99", OomKind.CAPTURE, 14_422_934, 126.0),  # wrapped "Capture cuda graph failed", 126 MiB logits
        ("0.994", OomKind.RAW_OOM, 14_481_316, 32.0),  # bare OOM in init_cuda_graph_state, 32 MiB
        ("0.999", OomKind.CUBLAS, None, None),  # CUBLAS_STATUS_ALLOC_FAILED before any capture
    ],
)
def test_tiny_graph_stage_failures_as_seen_on_the_h200(
    fraction: str, kind: OomKind, tokens: int | None, tried_mib: float | None
) -> None:
    _, p = plan(TINY, *spec(3, 1, 4), "--mem-fraction-static", fraction, "--cuda-graph-max-bs", "512",
                "--max-running-requests", "512")  # fmt: skip
    assert p.failure is not None and p.failure.kind is kind
    assert p.failure.stage is FailureStage.TARGET_GRAPH_CAPTURE
    if tokens is not None:
        assert p.kv_tokens == pytest.approx(tokens, rel=5e-4)
    if tried_mib is not None:
        assert p.failure.tried_mib == tried_mib
        assert p.failure.avail_gib * 1024 < tried_mib  # what was free could not hold it
    # under 4 GiB free, SGLang skips the prefill graphs and says so
    assert any(s.kind is StepKind.PREFILL_GATE for s in p.steps) or kind is OomKind.CUBLAS


def test_kimi_auto_fraction_is_076_and_leaves_21_71_gb() -> None:
    args, p = plan(KIMI, *KIMI_TP, *spec(3, 1, 4), "--cuda-graph-max-bs", "128")
    assert args.mem_fraction_static == 0.76
    assert args.max_running_requests == 48  # reset for speculative decoding
    pool = _kv(p, "target")
    assert pool.avail_after == pytest.approx(21.71, abs=0.01)
    assert p.free_at_start - pool.avail_after == pytest.approx(72.33, abs=0.01)


def test_kimi_seed_draft_on_top_of_auto_fraction_ooms_at_draft_graph_capture() -> None:
    # The auto fraction with the aggressive tree SGLang documents for EAGLE-3 (5 steps, top-k 8, 32 tokens).
    _, p = plan(KIMI, *KIMI_TP, *spec(5, 8, 32), "--cuda-graph-max-bs", "128")
    assert p.failure is not None
    assert p.failure.kind is OomKind.CAPTURE
    assert p.failure.stage is FailureStage.DRAFT_GRAPH_CAPTURE
    assert p.failure.name == "draft decode"
    # <=0.5.9: the draft's weights arrive after the target captured its graphs
    roles = [(s.kind, s.role) for s in p.steps]
    assert roles.index((StepKind.WEIGHTS, "draft")) > roles.index((StepKind.GRAPH, "target"))


@pytest.mark.parametrize("tree", [(3, 1, 4), (2, 1, 3)])
def test_kimi_known_good_configuration_fits(tree: tuple[int, int, int]) -> None:
    _, p = plan(KIMI, *KIMI_TP, *spec(*tree), "--mem-fraction-static", "0.88", "--cuda-graph-max-bs", "512",
                "--max-running-requests", "48")  # fmt: skip
    assert p.failure is None
    assert max(p.capture_sizes) == 48  # graphs capped at the request pool
    assert p.final_avail > 0.5


def test_kimi_low_fraction_fails_at_kv_with_the_old_runtime_error() -> None:
    _, p = plan(KIMI, *KIMI_TP, *spec(3, 1, 4), "--mem-fraction-static", "0.70")
    assert p.failure is not None
    assert p.failure.kind is OomKind.KV_RUNTIME_ERROR and p.failure.stage is FailureStage.KV_ALLOCATION


def test_kimi_high_fraction_leaves_no_room_for_the_draft() -> None:
    _, p = plan(
        KIMI, *KIMI_TP, *spec(3, 1, 4), "--mem-fraction-static", "0.95", "--max-running-requests", "48"
    )
    assert p.failure is not None
    assert p.failure.stage in (FailureStage.DRAFT_GRAPH_CAPTURE, FailureStage.KV_ALLOCATION,
                               FailureStage.WEIGHT_LOADING)  # fmt: skip


def test_smaller_graph_batch_frees_memory() -> None:
    # Auto fraction: the reserve shrinks with the graph batch, so the KV pool grows ...
    _, big = plan(KIMI, *KIMI_TP, "--cuda-graph-max-bs", "512")
    _, small = plan(KIMI, *KIMI_TP, "--cuda-graph-max-bs", "128")
    assert small.kv_tokens > big.kv_tokens
    # ... and at a fixed fraction the graphs simply take less.
    _, big = plan(KIMI, *KIMI_TP, "--mem-fraction-static", "0.85", "--cuda-graph-max-bs", "512")
    _, small = plan(KIMI, *KIMI_TP, "--mem-fraction-static", "0.85", "--cuda-graph-max-bs", "128")
    assert small.final_avail > big.final_avail + 1.0


def test_higher_fraction_buys_kv_tokens_with_graph_headroom() -> None:
    previous = None
    for f in ("0.80", "0.84", "0.88", "0.92"):
        _, p = plan(TINY, *TINY_RUN, "--mem-fraction-static", f)
        if previous is not None:
            assert p.kv_tokens > previous.kv_tokens and p.final_avail < previous.final_avail
        previous = p


def test_old_versions_size_the_target_pool_before_the_draft() -> None:
    flags = [*spec(3, 1, 4), "--mem-fraction-static", "0.85", "--cuda-graph-max-bs", "16"]
    _, new = plan({"base": TINY, "draft_weights_gib": 5.0}, *flags)
    _, old = plan({"base": TINY, "draft_weights_gib": 5.0, "version_behaviour": "<=0.5.9"}, *flags)
    # 0.5.14+ counts the draft weights and splits the rest with the draft pool: fewer tokens ...
    assert old.kv_tokens > new.kv_tokens
    # ... while <=0.5.9 pays for the draft out of the slack, leaving less behind.
    assert old.final_avail < new.final_avail


def test_capture_sizes_follow_sglang_lists() -> None:
    real_512 = json.loads(  # copied from the real graph-oom log's "Capture target verify" line
        "[1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30, 32, 40, 44, 48, 52, 56, "
        "60, 64, 72, 80, 88, 96, 104, 112, 120, 128, 136, 144, 152, 160, 168, 176, 184, 192, 200, 208, "
        "216, 224, 232, 240, 248, 256, 272, 288, 304, 320, 336, 352, 368, 384, 400, 416, 432, 448, 464, "
        "480, 496, 512]"
    )
    assert capture_sizes(512, True, 512) == real_512
    assert capture_sizes(512, True, 50)[-3:] == [44, 48, 50]
    assert len(capture_sizes(128, False, None)) == 20
    assert len(capture_sizes(512, False, None)) == 52
