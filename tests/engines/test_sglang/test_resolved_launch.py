"""What SGLang settled on for the speculative values, when it differs from what was asked, reaches the
trial's record and everything written from it: MLflow, result.json, best.json."""

from __future__ import annotations

import json
from pathlib import Path

from orchestrator.driver.answer.choose import answer_launches, choose_answer
from orchestrator.driver.answer.summary import write_best
from orchestrator.engines.sglang.logparse import parse_log
from orchestrator.mlflow_schema.write import result_json, trial_metrics
from orchestrator.records import (
    ResolvedLaunch,
    ServerConfig,
    StageMetrics,
    TrialRecord,
    TrialResult,
    TrialStatus,
)
from orchestrator.spec.sweep_spec import load_spec

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "sglang"
DEMO = Path(__file__).resolve().parents[3] / "trials" / "demo.yaml"
# What the launch asked: 6 draft tokens at top-k 1, which SGLang adjusts to steps + 1.
ASKED = ServerConfig(0.85, 32, 32, 3, 1, 6)


def _resolved() -> ResolvedLaunch:
    args = parse_log((FIXTURES / "0.5.9" / "topk1-adjusted.log").read_text()).args
    assert args is not None
    return args.launch_values()


def test_the_log_gives_the_speculative_values_sglang_settled_on() -> None:
    resolved = _resolved()
    assert (resolved.speculative_num_steps, resolved.speculative_eagle_topk) == (3, 1)
    assert resolved.speculative_num_draft_tokens == 4 != ASKED.speculative_num_draft_tokens


def _result() -> TrialResult:
    stage = StageMetrics(8, 16, 16, 0, 2.0, 1000.0, 8.0, 30.0, 412.5, 5.0, 23.4, 6.0, 2.25)
    return TrialResult(
        ASKED, TrialStatus.OK, "node-a", ("python3", "-m", "sglang.launch_server"), stages=(stage,),
        resolved_args=_resolved(),
    )  # fmt: skip


def test_mlflow_and_result_json_carry_the_resolved_values_beside_the_asked_ones() -> None:
    result = _result()
    record = TrialRecord(1, result, 1000.0)
    metrics = trial_metrics(record)
    assert metrics["resolved_speculative_num_draft_tokens"] == 4.0
    assert metrics["resolved_speculative_num_steps"] == 3.0
    data = json.loads(result_json(result))
    assert data["config"]["speculative_num_draft_tokens"] == 6
    assert data["resolved_args"]["speculative_num_draft_tokens"] == 4


def test_best_json_carries_the_resolved_values(tmp_path: Path) -> None:
    records = [TrialRecord(1, _result(), 1000.0)]
    answer = choose_answer(answer_launches(records))
    assert answer is not None
    best, _ = write_best(answer, records, load_spec(DEMO), tmp_path)
    assert best.resolved_args["speculative_num_draft_tokens"] == 4
    assert best.config["speculative_num_draft_tokens"] == 6
