"""The answer says when it and the server without speculation were measured on different nodes.

The real pair's grid on H100s (`tests/fixtures/sglang/0.5.17/smollm2-chat-h100/`): its baseline ran on
the first machine and its fastest trees on the fourth, and the answer's confidence line counted only the
noise between launches on one node. The confirmation then relaunched the baseline on the trees' machine
(trial 20): without that launch the study is the one the note was written for.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from orchestrator.driver.answer.best_file import BestFile
from orchestrator.driver.answer.conclusion import conclude, sweep_answer
from orchestrator.driver.answer.noise import Regime
from orchestrator.records import TrialRecord
from orchestrator.spec.sweep_spec import load_spec
from tests.driver.memory.h200_fixtures import study_records

ROOT = Path(__file__).resolve().parents[3]
PAIR = ROOT / "tests" / "fixtures" / "sglang" / "0.5.17" / "smollm2-chat-h100"
SPEC = ROOT / "trials" / "smollm2-h200-grid.yaml"


BASELINE_RELAUNCH = 20  # the baseline on the machine of the fastest trees (node 5)


def _records(*, relaunched: bool = True) -> list[TrialRecord]:
    records = sorted(study_records(PAIR), key=lambda r: r.number)
    return [r for r in records if relaunched or r.number != BASELINE_RELAUNCH]


def _notes(records: list[TrialRecord], tmp_path: Path) -> list[str]:
    lines = conclude(records, load_spec(SPEC), tmp_path).lines
    return [line for line in lines if "never ran on the same node" in line]


def test_an_answer_measured_on_another_node_than_the_baseline_says_so(tmp_path: Path) -> None:
    records = _records(relaunched=False)
    notes = _notes(records, tmp_path)
    assert len(notes) == 1, notes
    assert "and the server without speculation" in notes[0] and "launch both on one node" in notes[0]
    best = BestFile.read(tmp_path)  # the report reads it from best.json
    assert best is not None and best.node_note == notes[0]


def test_no_note_once_the_baseline_ran_on_the_trees_machine(tmp_path: Path) -> None:
    assert _notes(_records(), tmp_path) == []


def test_no_note_when_they_shared_a_node(tmp_path: Path) -> None:
    records = _records(relaunched=False)
    one = records[0].result.node_id
    # One Ray node and no GPU UUIDs: the machine of every launch is that node (`confirm.machine`).
    same = [replace(r, result=replace(r.result, node_id=one, gpu_before=(), gpu_after=())) for r in records]
    assert _notes(same, tmp_path) == []


def test_one_regime_for_every_comparison_of_the_study() -> None:
    """Seen on the real pair: the answer against the server without speculation was judged with the
    overhead-bound prior (the median of a 5.6 ms plain step and a 10 ms verify step) and, on the next
    line, against the runner-up with the GPU-bound one (two trees' 10 ms verify steps). A verify step is
    long because it drafts and verifies a tree, not because the node is GPU-bound: the target's own step,
    the baseline's, says which regime the node is in, for every comparison."""
    answer = sweep_answer(_records(relaunched=False))
    assert answer is not None and answer.versus_nospec is not None
    assert answer.verdict.regime is Regime.OVERHEAD_BOUND, answer.verdict.statement
    assert answer.versus_nospec.regime is Regime.OVERHEAD_BOUND
