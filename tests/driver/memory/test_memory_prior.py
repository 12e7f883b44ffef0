"""The memory prior against every real SGLang log among the fixtures: weights within 2 %, KV pool within
3 %, the printed minimum viable fraction, the graph memory, and whether the start-up fits.

A new real log is one line in ``REAL_LOGS``: the file, the models' config.json folders it ran with, the
GPU's total memory (NVML, MiB) and whether prefill CUDA graphs were on.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from orchestrator.driver.memory.facts import MemoryFacts, facts_from_shapes, without_prefill_graphs
from orchestrator.driver.memory.node_facts import kv_dtype_bytes
from orchestrator.driver.memory.prior import estimate
from orchestrator.engines.sglang.logparse import SglangLogReport, parse_log
from orchestrator.footprint.shape import ModelShape, ShapeError, load_shape, read_config
from orchestrator.records import FailureStage, ServerConfig
from orchestrator.spec.engine_catalog import reading
from orchestrator.spec.fixed_flags import ServerFacts, parse_fixed, read_facts

ROOT = Path(__file__).resolve().parents[3]
FIXTURES = ROOT / "tests" / "fixtures" / "sglang" / "0.5.17"
TINY = ("trials/models/tiny-llama", "trials/models/tiny-llama-eagle3")
LLAMA8B = ("trials/models/llama3-8b-shape", "trials/models/llama3-8b-eagle3-shape")
QWEN32B = ("trials/models/qwen3-32b-shape", "trials/models/qwen3-32b-eagle3-shape")
H200_MIB = 143771.0
PRINT_STEP_GB = 0.01  # SGLang prints GB with two decimals: a figure is known to +-0.005, a difference to 0.01


@dataclass(frozen=True)
class RealLog:
    log: str  # under tests/fixtures/sglang/0.5.17
    models: tuple[str, str]
    gpu_mib: float = H200_MIB
    # What the allocator gives back between the pools and the first capture, which the prior does not
    # credit (so what it predicts is left is safe): 0.8-1.1 GiB on the 8B shape, 1.5-1.7 on the 32B
    # (`test_graph_runners.py`; 1.8 and 2.9 before the graphs were costed per runner).
    uncredited_gb: float = 1.2


REAL_LOGS = [
    RealLog("ok.log", TINY),
    RealLog("accept.log", TINY),
    RealLog("kv-oom.log", TINY),
    RealLog("graph-oom.log", TINY),
    RealLog("graph-oom-0.994.log", TINY),
    RealLog("tp2-ok.log", TINY),
    RealLog("tp2-ok-0.8.log", TINY),
    RealLog("tp2-kv-oom.log", TINY),
    RealLog("chat-h200/kv-oom.log", TINY),
    RealLog("chat-h200/ok-fixed.log", TINY),
    RealLog("chat-h200/ok-adaptive-tiers.log", TINY),
    RealLog("chat-h200/ok-adaptive-default.log", TINY),
    RealLog("specsweep-h200/ok-dummy.log", TINY),
    RealLog("specsweep-h200/ok-accept.log", TINY),
    RealLog("specsweep-h200/kv-oom.log", TINY),
    RealLog("specsweep-h200/graph-oom.log", TINY),
    # The Llama-3-8B shape (dummy weights), prefill graphs off, fractions 0.10-0.98, graph bs 16 and 256.
    RealLog("llama8b-h200/f50b16.log", LLAMA8B),
    RealLog("llama8b-h200/f50b256.log", LLAMA8B),
    RealLog("llama8b-h200/f85b16.log", LLAMA8B),
    RealLog("llama8b-h200/f85b256.log", LLAMA8B),
    RealLog("llama8b-h200/f95b16.log", LLAMA8B),
    RealLog("llama8b-h200/f95b256.log", LLAMA8B),
    RealLog("llama8b-h200/kvfloor010.log", LLAMA8B),
    RealLog("llama8b-h200/f98b256s4k2d8.log", LLAMA8B),
    RealLog("llama8b-h200/f96b256s4k2d8.log", LLAMA8B),
    # The Qwen3-32B shape (dummy weights, a shape the prior was not fitted on): its sweep's speculative
    # launches at the fraction the policy chose for them, 0.96, graph bs 32.
    *[
        RealLog(f"qwen32b-sweep/trials/{n:04d}/server.log", QWEN32B, uncredited_gb=1.8)
        for n in (1, 2, 3, 5, 6)
    ],
]


def _config(report: SglangLogReport) -> ServerConfig:
    a = report.args
    assert a is not None and a.mem_fraction_static is not None and a.cuda_graph_max_bs is not None
    adaptive = a.raw.get("speculative_adaptive") == "True"
    return ServerConfig(
        mem_fraction_static=a.mem_fraction_static,
        cuda_graph_max_bs=a.cuda_graph_max_bs,
        max_running_requests=a.max_running_requests or 48,
        speculative_num_steps=a.speculative_num_steps,
        speculative_eagle_topk=a.speculative_eagle_topk,
        speculative_num_draft_tokens=a.speculative_num_draft_tokens,
        speculative_adaptive="default" if adaptive else None,
    )


def _facts(case: RealLog, report: SglangLogReport) -> MemoryFacts:
    assert report.args is not None
    target, draft = (load_shape(ROOT / p) for p in case.models)
    facts = facts_from_shapes(target, draft, case.gpu_mib, report.args.tp_size or 1, "0.5.17")
    if report.args.raw.get("cuda_graph_backend_prefill") == "'disabled'":
        facts = without_prefill_graphs(facts)
    return facts


def _close(predicted: float, real: float, rel: float) -> bool:
    return abs(predicted - real) <= max(rel * real, PRINT_STEP_GB)


@pytest.mark.parametrize("case", REAL_LOGS, ids=lambda c: c.log)
def test_prior_matches_real_log(case: RealLog) -> None:
    report = parse_log((FIXTURES / case.log).read_text())
    config = _config(report)
    est = estimate(_facts(case, report), config)
    m = report.memory
    assert m.weights_gb is not None and _close(est.weights_gb, m.weights_gb, 0.02), (
        est.weights_gb,
        m.weights_gb,
    )
    assert m.draft_weights_gb is not None
    assert _close(est.draft_weights_gb, m.draft_weights_gb, 0.02), (est.draft_weights_gb, m.draft_weights_gb)
    text = (FIXTURES / case.log).read_text()
    if viable := re.search(r"minimum viable = 1 - available/pre = ([0-9.]+)", text):
        assert abs(est.floor_fraction - float(viable.group(1))) <= 0.0005
        assert not est.fits and est.stage is FailureStage.KV_ALLOCATION
        return
    assert m.kv_cache_tokens is not None
    assert abs(est.kv_tokens - m.kv_cache_tokens) <= 0.03 * m.kv_cache_tokens, (
        est.kv_tokens,
        m.kv_cache_tokens,
    )
    if report.ready:
        assert est.fits, est.reason
        assert m.avail_after_kv_gb is not None and m.avail_end_gb is not None
        measured = m.avail_after_kv_gb - m.avail_end_gb  # set-up, prefill and decode graphs together
        captured = (m.graph_gb or 0.0) + (m.draft_graph_gb or 0.0)  # the capture lines' own figures
        if measured >= captured:
            assert abs(est.graph_gb - measured) <= 0.1 + 0.1 * measured, (est.graph_gb, measured)
        else:
            # The 8B shape: free memory rises between the pools and the first capture (SGLang empties
            # the allocator's cache, 0.6-0.9 GB here), which the prior does not credit. What it must get
            # right is what is left at the end: never more than the log shows (safe), at most the case's
            # uncredited figure less;
            # its graphs within the tiny model's set-up (0.62 GB) and 10 % of what the captures took.
            assert abs(est.graph_gb - captured) <= 0.62 + 0.1 * captured, (est.graph_gb, captured)
            slack = case.uncredited_gb
            assert est.left_gb <= m.avail_end_gb <= est.left_gb + slack, (est.left_gb, m.avail_end_gb)
    else:
        assert report.failure is not None and report.failure.stage in (
            FailureStage.TARGET_GRAPH_CAPTURE,
            FailureStage.DRAFT_GRAPH_CAPTURE,
        )
        assert not est.fits and est.stage is report.failure.stage, est.reason


def test_llama8b_shape_figures_of_the_h200_run() -> None:
    """The 8B shape's real figures (SGLang 0.5.17, one H200, 2026-12-01): weights 14.98 + 2.14 GB, the
    KV error's minimum viable 0.1237 at fraction 0.1, 845,729 tokens at 0.85 on the server without
    speculation, and the draft's graph capture out of memory at 0.98 with graph bs 256, s4k2d8."""
    target, draft = (load_shape(ROOT / p) for p in LLAMA8B)
    facts = facts_from_shapes(target, draft, H200_MIB, 1)
    spec = estimate(facts, ServerConfig(0.1, 64, 64, 3, 1, 4))
    assert _close(spec.weights_gb, 14.98, 0.02) and _close(spec.draft_weights_gb, 2.14, 0.02)
    assert abs(spec.floor_fraction - 0.1237) <= 0.0005
    assert spec.stage is FailureStage.KV_ALLOCATION
    plain = estimate(facts, ServerConfig(0.85, 64, 64))
    assert abs(plain.kv_tokens - 845_729) <= 0.03 * 845_729
    big = estimate(facts, ServerConfig(0.98, 256, 256, 4, 2, 8))
    assert not big.fits and big.stage is FailureStage.DRAFT_GRAPH_CAPTURE


def test_floor_and_ceiling_bound_the_fitting_fractions() -> None:
    target, draft = (load_shape(ROOT / p) for p in LLAMA8B)
    facts = facts_from_shapes(target, draft, H200_MIB, 1)
    config = ServerConfig(0.5, 256, 256, 4, 2, 8)
    est = estimate(facts, config)
    assert est.floor_fraction < est.ceiling_fraction
    for f in (est.floor_fraction - 0.01, est.ceiling_fraction + 0.01):
        assert not estimate(facts, replace(config, mem_fraction_static=f)).fits
    middle = (est.floor_fraction + est.ceiling_fraction) / 2
    assert estimate(facts, replace(config, mem_fraction_static=middle)).fits


def _shape_of(tmp_path: Path, **config: object) -> ModelShape:
    (tmp_path / "config.json").write_text(json.dumps(config))
    return load_shape(tmp_path)


DEEPSEEK_V3 = {
    "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "hidden_size": 7168,
    "num_hidden_layers": 61, "num_attention_heads": 128, "num_key_value_heads": 128, "q_lora_rank": 1536,
    "kv_lora_rank": 512, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128,
    "intermediate_size": 18432, "moe_intermediate_size": 2048, "n_routed_experts": 256,
    "n_shared_experts": 1, "first_k_dense_replace": 3, "vocab_size": 129280, "torch_dtype": "bfloat16",
    "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]},
}  # fmt: skip


def test_mla_moe_fp8_shape(tmp_path: Path) -> None:
    """DeepSeek-V3's shape: 671 B parameters in fp8 (about 79 GiB per GPU at tp 8), and its latent KV
    cache (61 x (512 + 64) x 2 bytes, whole on every GPU, as the Kimi profile states)."""
    shape = _shape_of(tmp_path, **DEEPSEEK_V3)
    assert 640e9 < shape.weight_bytes(1) < 700e9
    assert shape.kv_bytes_per_token(8) == shape.kv_bytes_per_token(1) == 61 * 576 * 2
    bf16 = _shape_of(tmp_path, **{**DEEPSEEK_V3, "quantization_config": None})
    assert bf16.weight_bytes(1) == pytest.approx(2 * shape.weight_bytes(1), rel=0.02)


def test_quantized_and_mixture_of_experts_llamas(tmp_path: Path) -> None:
    base = read_config(ROOT / LLAMA8B[0])
    base.pop("__path__")
    bf16 = _shape_of(tmp_path, **base).weight_bytes(1)
    fp8 = _shape_of(tmp_path, **base, quantization_config={"quant_method": "fp8"}).weight_bytes(1)
    awq = _shape_of(
        tmp_path, **base, quantization_config={"quant_method": "awq", "bits": 4, "group_size": 128}
    )
    embeddings = 2 * 128256 * 4096 * 2  # embeddings and LM head stay 16-bit
    assert fp8 - embeddings == pytest.approx((bf16 - embeddings) / 2, rel=0.01)
    assert awq.weight_bytes(1) - embeddings == pytest.approx((bf16 - embeddings) / 4, rel=0.05)
    mixtral = {**base, "model_type": "mixtral", "vocab_size": 32000, "num_local_experts": 8}
    assert 46e9 < _shape_of(tmp_path, **mixtral).weight_bytes(1) / 2 < 47.5e9  # Mixtral-8x7B: 46.7 B
    with pytest.raises(ShapeError, match=r"quantization_config\.quant_method"):
        _shape_of(tmp_path, **base, quantization_config={"quant_method": "bitnet"})
    with pytest.raises(ShapeError, match="model_type"):
        _shape_of(tmp_path, **{**base, "model_type": "mamba"})


def _sglang(flags: list[str]) -> ServerFacts:
    return read_facts(parse_fixed(flags), reading("sglang"))


def test_server_flags_the_prior_reads() -> None:
    assert not _sglang(["--cuda-graph-backend-prefill", "disabled"]).prefill_graphs
    assert not _sglang(["--cuda-graph-backend-prefill=disabled"]).prefill_graphs
    assert not _sglang(["--disable-cuda-graph"]).prefill_graphs and _sglang(["--x"]).prefill_graphs
    assert kv_dtype_bytes(_sglang(["--kv-cache-dtype", "fp8_e4m3"]).kv_cache_dtype) == 1.0
    assert kv_dtype_bytes(_sglang(["--kv-cache-dtype", "auto"]).kv_cache_dtype) is None


def test_a_draft_that_loads_after_the_pools_is_named_where_it_cannot_load() -> None:
    # SGLang <= 0.5.9: the draft's weights come out of what the target's pools leave. A failure at
    # that step must say so, not speak of graphs alone with the draft's share already taken away.
    target, draft = (load_shape(ROOT / p) for p in LLAMA8B)
    facts = replace(facts_from_shapes(target, draft, H200_MIB, 1, "0.5.9"))
    late = [
        est
        for f in (0.95, 0.96, 0.97, 0.98, 0.99)
        if (est := estimate(facts, ServerConfig(f, 64, 64, 3, 1, 4))).stage is FailureStage.WEIGHT_LOADING
    ]
    assert late, "no fraction where the draft's weights no longer load"
    assert all("the draft's weights and KV pool take" in est.reason for est in late)


def test_the_8b_prior_keeps_its_margin_below_the_real_graph_ceiling() -> None:
    # Where the prior errs it errs safe, and by how much is known: at 0.97 with graph bs 256 and s4k2d8
    # the real server started with 0.84 GB left (llama8b-h200/f97b256s4k2d8.log); the prior, which does
    # not credit the cache SGLang empties before capture, refuses it. At 0.98 both say draft graphs.
    report = parse_log((FIXTURES / "llama8b-h200/f97b256s4k2d8.log").read_text())
    est = estimate(_facts(RealLog("llama8b-h200/f97b256s4k2d8.log", LLAMA8B), report), _config(report))
    assert report.ready and report.memory.avail_end_gb is not None
    assert not est.fits and est.stage is FailureStage.DRAFT_GRAPH_CAPTURE
    assert est.left_gb < 0 < report.memory.avail_end_gb < 1.0  # a margin under a gigabyte, not more
    assert 0.96 < est.ceiling_fraction < 0.97
