"""A new architecture on one H200: QwQ-32B (Qwen2 with QKV biases: 64 layers, hidden 5120, an MLP of 27648,
40 heads, 8 KV heads, vocabulary 152064) with SpecForge's 1-layer EAGLE-3 draft shape, dummy weights,
SGLang 0.5.17 (tests/fixtures/sglang/0.5.17/"qwq32b-sweep", then "qwq32b-peak").

`trials/h200-qwq32b.yaml` (the baseline and four trees chosen by the policy, concurrency 8 and 32) launched
every tree at 0.97 and none ran out of memory; its answer was the server without speculation (1324.0 tok/s
against 724.8 for the best tree: a dummy draft accepts nothing). Its console and best.json are the
"qwq32b-sweep" fixtures. `trials/h200-qwq32b-peak.yaml` (prior off) then launched two trees at 0.98:

| # | configuration | left: predicted / real GiB | peak predicted GiB | predicted | real |
| --- | --- | --- | --- | --- | --- |
| 0 | mf0.98 s3k1d4 | 2.98 (the prior alone) / 4.30 | 4.73 | out of memory | served |
| 1 | mf0.98 s4k4d8 | 3.72 (after trial 0) / 3.75 | 4.97 | out of memory | out of memory under load (Triton) |

Trial 0 is a miss on the safe side: the peak is over-predicted by at least 0.43 GiB on this shape (at
least 0.15 and 0.61 on Mistral-Small-24B), so the policy launched its trees one point of fraction lower
than would have served. Trial 1 is the boundary predicted right.
"""

from __future__ import annotations

import json
from pathlib import Path

from orchestrator.driver.memory.prior import estimate
from orchestrator.driver.memory.prior_model import PriorMemoryModel
from orchestrator.records import FailureKind, TrialRecord, TrialStatus
from tests.driver.memory.h200_fixtures import prior_model, study_records

ROOT = Path(__file__).resolve().parents[3]
FIXTURES = ROOT / "tests" / "fixtures" / "sglang" / "0.5.17"
SWEEP, PEAK = FIXTURES / "qwq32b-sweep", FIXTURES / "qwq32b-peak"
SPEC = ROOT / "trials" / "h200-qwq32b.yaml"


def _records() -> list[TrialRecord]:
    return study_records(PEAK)


def _model() -> PriorMemoryModel:
    return prior_model(SPEC)


def test_the_prior_has_the_weights_and_the_kv_pool_of_a_qwen2_shape() -> None:
    """QKV biases, a 40-head attention and a 152064 vocabulary: weights within 0.02 GB of the log, the KV
    pool within 0.02 % (288,477 tokens predicted, 288,435 allocated)."""
    model = _model()
    assert model.facts is not None
    for record in _records():
        m, config = record.result.memory, record.result.config
        est = estimate(model.facts, config)
        assert m.weights_gb is not None and abs(est.weights_gb - m.weights_gb) <= 0.02
        assert m.draft_weights_gb is not None and abs(est.draft_weights_gb - m.draft_weights_gb) <= 0.02
        assert m.kv_cache_tokens is not None
        assert abs(est.kv_tokens - m.kv_cache_tokens) <= 0.0002 * m.kv_cache_tokens


def test_start_up_is_predicted_low_before_any_launch_and_within_0_05_gib_after_one() -> None:
    model = _model()
    first, second = _records()
    assert first.result.memory.avail_end_gb is not None and second.result.memory.avail_end_gb is not None
    left = model.left_after_start(first.result.config)
    assert left is not None and left < first.result.memory.avail_end_gb  # safe: 2.98 against 4.30
    model.observe(first.number, first.result)
    left = model.left_after_start(second.result.config)
    assert left is not None and abs(left - second.result.memory.avail_end_gb) <= 0.05


def test_the_serving_boundary_at_0_98_is_decided_on_the_safe_side() -> None:
    """s3k1d4 served at 0.98 though predicted not to (4.30 GiB free against a 4.73 GiB peak); s4k4d8, as
    predicted from the launch before it, ran out of memory under load."""
    model = _model()
    first, second = _records()
    assert first.result.status is TrialStatus.OK and model.predict(first.result.config).skip
    peak = model.serving_peak(first.result.config)
    assert peak is not None and first.result.memory.avail_end_gb is not None
    assert peak.total_gib - first.result.memory.avail_end_gb > 0.4
    model.observe(first.number, first.result)
    assert second.result.status is TrialStatus.OOM_UNDER_LOAD
    assert second.result.failure is not None and second.result.failure.kind is FailureKind.OOM
    assert model.predict(second.result.config).skip


def test_the_sweep_launched_every_tree_below_that_boundary_and_answered_no_speculation() -> None:
    """Every speculative launch of the sweep was at 0.97 (none out of memory), the baseline at 0.83; the
    answer is the server without speculation, clearly ahead."""
    console = (SWEEP / "console.txt").read_text()
    rows = [line.split() for line in console.splitlines() if line[:1].isdigit() and " ok " in line]
    assert len(rows) == 5 and all(row[1] == "ok" for row in rows)
    fractions = {row[-5] if row[-1] == "(baseline)" else row[-4] for row in rows}
    assert fractions == {"mf0.830", "mf0.970"}
    best = json.loads((SWEEP / "best.json").read_text())
    assert best["nospec"] and best["config_label"].endswith("nospec")
    assert best["verdict"]["call"] == "clearly ahead"
