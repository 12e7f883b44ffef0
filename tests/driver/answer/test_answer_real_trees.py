"""The verdict on the trees measured on one H200 (tests/fixtures/sglang/0.5.17/"llama8b-trees").

The 8B shape's server without speculation steps in 5.0-5.6 ms (TPOT p50 at concurrency 8 and 32): a
GPU-bound model (its 15 GB of weights are read every step, about 3.3 ms of the step at the H200's
bandwidth) whose decode step is as short as a tiny model's pure overhead (3.8-7.0 ms on the same GPU).
The step alone called it overhead-bound and gave the comparison a 7.5 % launch-to-launch prior; the
weights each GPU reads say what it is.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import TypeAdapter

from orchestrator.driver.answer.choose import answer_launches, baseline_launches, choose_answer
from orchestrator.driver.answer.noise import Regime, StageTiming, calibrate, regime_of
from orchestrator.engines.sglang.logparse import parse_log
from orchestrator.records import FailureKind, TrialRecord

FIXTURES = Path(__file__).parents[2] / "fixtures" / "sglang" / "0.5.17"
TREES = FIXTURES / "llama8b-trees" / "records"
_RECORD = TypeAdapter(TrialRecord)


def _records(folder: Path) -> list[TrialRecord]:
    return [_RECORD.validate_python(json.loads(p.read_text())) for p in sorted(folder.glob("*.json"))]


def test_the_8b_server_without_speculation_is_gpu_bound_though_its_step_is_short() -> None:
    base = baseline_launches(_records(TREES))
    assert base and all((b.timing.step_ms or 99) < 8.5 for b in base)  # shorter than the old threshold
    regime, _ = regime_of([b.timing for b in base])
    assert regime is Regime.GPU_BOUND


def test_the_tiny_models_stay_overhead_bound() -> None:
    """The tiny Llama's real log: 0.10 GB of weights, a decode step of overhead only."""
    memory = parse_log((FIXTURES / "specsweep-h200" / "ok-accept.log").read_text()).memory
    assert memory.weights_gb == 0.10
    regime, _ = regime_of([StageTiming(5.0, True, memory.weights_gb)])
    assert regime is Regime.OVERHEAD_BOUND
    # Without a memory account, the step decides as before.
    assert regime_of([StageTiming(5.0, True)])[0] is Regime.OVERHEAD_BOUND
    assert regime_of([StageTiming(10.4, True)])[0] is Regime.GPU_BOUND


def test_the_baseline_against_the_trees_is_judged_with_the_gpu_bound_prior() -> None:
    records = _records(TREES)
    answer = choose_answer(answer_launches(records), baseline_launches(records))
    assert answer is not None and answer.comparison is not None
    assert answer.comparison.noise.regime is Regime.GPU_BOUND
    # 5471.5 against 2704.7 tok/s (a dummy draft): the answer is the server without speculation
    assert answer.nospec
    noise = calibrate([[1.0]], [b.timing for b in baseline_launches(records)])
    assert noise.regime is Regime.GPU_BOUND


def test_the_qwen3_32b_sweep_answers_no_speculation_with_no_launch_out_of_memory() -> None:
    """The sweep of a shape the project had not run (Qwen3-32B, dummy weights, trials/h200-32b.yaml):
    the baseline and five trees, none out of memory at start-up or under load, and the answer the figures
    give: the server without speculation (1213.6 tok/s against 603.8 for the best tree, a dummy draft)."""
    records = _records(FIXTURES / "qwen32b-sweep" / "records")
    statuses = sorted(r.result.status.value for r in records)
    assert statuses == ["interrupted"] + ["ok"] * 6  # trial 4: stopped while starting, then run again
    assert all(r.result.failure is None or r.result.failure.kind is not FailureKind.OOM for r in records)
    answer = choose_answer(answer_launches(records), baseline_launches(records))
    assert answer is not None and answer.nospec and answer.comparison is not None
    assert answer.comparison.noise.regime is Regime.GPU_BOUND
    best = json.loads((FIXTURES / "qwen32b-sweep" / "best.json").read_text())
    assert best["config_label"].endswith("nospec") and best["verdict"]["call"] == "clearly ahead"
