"""The memory model and the simulator across tensor-parallel sizes, on real SGLang 0.5.17 logs."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.driver.memory.learned import MemoryModel, TpFigures, kv_heads_of
from orchestrator.engines.sglang.logparse import parse_log
from orchestrator.footprint.shape import kv_shards
from orchestrator.records import TrialResult, TrialStatus
from orchestrator.spec.search import make_config

ROOT = Path(__file__).resolve().parents[3]
FIX = ROOT / "tests" / "fixtures" / "sglang" / "0.5.17"
# What SGLang 0.5.17 allocated per GPU for the tiny Llama at mem_fraction_static 0.85 on H200s.
REAL_KV_TOKENS = {
    tp: parse_log((FIX / name).read_text()).memory.kv_cache_tokens or 0
    for tp, name in ((1, "ok.log"), (2, "tp2-ok.log"))
}


def result(log: Path, config: tuple[float, int, int, int, int, int]) -> TrialResult:
    report = parse_log(log.read_text())
    return TrialResult(make_config(*config), TrialStatus.OK, "n", (), memory=report.memory)


def test_kv_heads_are_read_from_the_model_config() -> None:
    assert kv_heads_of(str(ROOT / "trials" / "models" / "tiny-llama")) == 8
    assert kv_heads_of(str(ROOT / "no-such-model")) is None


def test_tp_splits_weights_and_kv_bytes_until_one_head_per_gpu() -> None:
    one = TpFigures(avail_at_start_gb=139.09, weights_gb=0.15, kv_gb=118.06, kv_tokens=12_379_562)
    two = one.at_tp(1, 2, kv_heads=8)
    assert two.weights_gb == pytest.approx(0.075)
    # Half the bytes per token, and the KV pool gets what the weights gave back.
    assert two.kv_gb == pytest.approx(118.06 + 0.075)
    assert two.kv_tokens == pytest.approx(2 * 12_379_562 * (118.135 / 118.06))
    assert [kv_shards(tp, 8) for tp in (1, 2, 8, 16)] == [1, 2, 8, 8]
    # Past the KV heads the cache is replicated: tp 16 holds no more tokens per GPU than tp 8 would.
    eight, sixteen = one.at_tp(1, 8, kv_heads=8), one.at_tp(1, 16, kv_heads=8)
    assert sixteen.kv_tokens / eight.kv_tokens == pytest.approx(1.0, abs=0.001)
    assert one.at_tp(1, 1).kv_tokens == pytest.approx(one.kv_tokens)


def test_a_tp1_trial_predicts_the_real_tp2_kv_pool_within_5_percent() -> None:
    assert REAL_KV_TOKENS == {1: 12_379_562, 2: 24_618_345}
    model = MemoryModel(tp=2, kv_heads=8)
    model.observe(0, result(FIX / "ok.log", (0.85, 16, 16, 3, 1, 4)), tp=1)
    assert model.ready
    assert model.weights_gb == pytest.approx(0.05) and model.draft_weights_gb == pytest.approx(0.025)
    predicted = model.predict(make_config(0.85, 16, 16, 3, 1, 4)).kv_tokens
    assert predicted is not None
    assert abs(predicted - REAL_KV_TOKENS[2]) < 0.05 * REAL_KV_TOKENS[2]
    # Without the tp the same trial would predict half the pool.
    flat = MemoryModel()
    flat.observe(0, result(FIX / "ok.log", (0.85, 16, 16, 3, 1, 4)))
    flat_kv = flat.predict(make_config(0.85, 16, 16, 3, 1, 4)).kv_tokens
    assert flat_kv is not None and abs(flat_kv - REAL_KV_TOKENS[2]) > 0.4 * REAL_KV_TOKENS[2]


def test_the_minimum_viable_fraction_falls_with_tp() -> None:
    one, two = MemoryModel(tp=1, kv_heads=8), MemoryModel(tp=2, kv_heads=8)
    trial = result(FIX / "ok.log", (0.85, 16, 16, 3, 1, 4))
    one.observe(0, trial, tp=1)
    two.observe(0, trial, tp=1)
    # At tp 1 fraction 0.001 leaves no KV pool (seen: the real 0.001 run OOMed); at tp 2 it starts.
    assert one.predict(make_config(0.001, 16, 16, 3, 1, 4)).skip
    assert not two.predict(make_config(0.001, 16, 16, 3, 1, 4)).skip


def test_kv_prediction_at_tp8_from_the_real_tp1_and_tp2_logs() -> None:
    """Against the synthesized tp=8 log (SGLang's sizing rule applied to 8 GPUs; see the README)."""
    tp8 = parse_log((FIX / "tp8-ok.log").read_text()).memory.kv_cache_tokens
    assert tp8 == 98_417_246
    for tp, name in ((1, "ok.log"), (2, "tp2-ok.log")):
        model = MemoryModel(tp=8, kv_heads=8)
        model.observe(0, result(FIX / name, (0.85, 16, 16, 3, 1, 4)), tp=tp)
        predicted = model.predict(make_config(0.85, 16, 16, 3, 1, 4)).kv_tokens
        assert predicted is not None and abs(predicted - tp8) < 0.05 * tp8, (tp, predicted)
