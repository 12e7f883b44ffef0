"""The verdict on the grid measured on one H200 (tests/fixtures/sglang/0.5.17/llama8b-grid).

Two configurations that were never in the running (graph bs 16 under max running 256: no CUDA graph
for the concurrency-32 stage, which never settled) must not lend their ramp-up to the noise of the
comparison that decides the answer, whose stages were steady: launched again, the two leaders moved by
0.4 % and 0.6 %, so the 15 % a ramp-up stage is given would call anything too close for ever.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import TypeAdapter

from orchestrator.driver.answer.choose import answer_launches, choose_answer
from orchestrator.driver.answer.noise import PRIORS, NoiseSource, Regime
from orchestrator.records import TrialRecord

GRID = Path(__file__).parents[2] / "fixtures" / "sglang" / "0.5.17" / "llama8b-grid"
_RECORD = TypeAdapter(TrialRecord)


def _records(folder: Path) -> list[TrialRecord]:
    return [_RECORD.validate_python(json.loads(p.read_text())) for p in sorted(folder.glob("*.json"))]


def test_unsteady_losers_do_not_widen_the_leaders_noise() -> None:
    records = _records(GRID / "records")
    assert any(not s.steady for r in records for s in r.result.stages)  # the losers' ramp-up is there
    answer = choose_answer(answer_launches(records))
    assert answer is not None
    verdict = answer.verdict
    assert verdict.noise_source is NoiseSource.PRIOR and verdict.regime is Regime.GPU_BOUND
    prior = PRIORS[Regime.GPU_BOUND]
    assert verdict.launch_sd == pytest.approx((prior.launch_sd**2 + prior.stage_sd**2) ** 0.5)
    assert "too short to be steady" not in verdict.statement
    # 2807.6 against 2795.0: 0.4 % apart, inside a GPU-bound node's noise
    assert verdict.call.value == "too close to call"
    assert verdict.noise is not None and verdict.noise < 0.05


def test_a_baseline_faster_than_every_draft_is_the_answer(tmp_path: Path) -> None:
    # The grid's draft has dummy weights (accept length 1.01): without speculation the same server
    # measured 2908.6 tok/s, 3.6 % above the best speculative configuration (2807.6), beyond the 3.4 %
    # that noise alone opens between two single launches on a GPU-bound node. The answer is that server:
    # the `best:` line, best.json and its command (no speculative flag) say so, at every level measured.
    from orchestrator.driver.answer.best_file import BestFile
    from orchestrator.driver.answer.conclusion import conclude
    from orchestrator.driver.answer.levels import LevelCall
    from orchestrator.spec.sweep_spec import load_spec

    records = _records(GRID / "records")
    spec = load_spec(Path(__file__).parents[3] / "trials" / "h200-8b-grid.yaml")
    concluded = conclude(records, spec, tmp_path)
    lines = "\n".join(concluded.lines)
    assert concluded.lines[0].startswith("\nbest: serve without speculation: trial 0, 2908.6 tok/s")
    assert "speculation does not pay here" in lines and "3.6 % above" in lines
    best = BestFile.read(tmp_path)
    assert best is not None and best.nospec and best.launches == [0] and best.trial == 0
    assert best.verdict.call.value == "clearly ahead" and best.verdict.runner_up == [4]
    assert best.verdict.runner_up_median == pytest.approx(2807.6, abs=0.05)
    assert not [a for a in best.command if a.startswith("--speculative")]
    # 1597.5 against 1087.5 at concurrency 8, 2908.6 against 2807.6 at 32
    assert [(lv.concurrency, lv.call) for lv in best.speculation_by_level] == [
        (8, LevelCall.LOSES),
        (32, LevelCall.LOSES),
    ]
    assert best.split is None
