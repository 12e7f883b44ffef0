"""The real pair's grid on one H100 (`GRIDS["real_pair"]`, tests/fixtures/sglang/0.5.17/smollm2-grid12-h100)
as the replay reads it: its space is exactly the twelve launched trees, complete, each answering with its
record's objective; the server without speculation beside them is the user's optimum, and specsweep as it
ships answers with it."""

from __future__ import annotations

import pytest

from benchmarks.search.replay import replay
from benchmarks.truth.measured_grid import GRIDS, load_records
from orchestrator.driver.answer.noise import Regime
from orchestrator.spec.sweep_spec import load_spec

pytestmark = pytest.mark.filterwarnings(
    "ignore::optuna.exceptions.ExperimentalWarning", "ignore::FutureWarning"
)
PAIR = GRIDS["real_pair"]


def test_the_replayed_space_is_the_twelve_launched_trees_and_complete() -> None:
    launched = {k.to_config() for k in load_spec(PAIR.spec).known_good}
    replayed = PAIR.replayed()
    assert len(launched) == 12 and set(replayed.configs) == launched
    assert replayed.complete and replayed.note() == ""
    for record in load_records(PAIR.folder):
        if record.result.config.speculative:
            assert replayed.oracle.evaluate(record.result.config).objective == pytest.approx(record.objective)


def test_the_user_s_optimum_is_the_server_without_speculation_and_specsweep_answers_it() -> None:
    best, results = replay(PAIR, seeds=1, budget=8, regime=Regime.OVERHEAD_BOUND, with_baseline=True)
    base = next(r.objective for r in load_records(PAIR.folder) if not r.result.config.speculative)
    assert best == pytest.approx(base)
    ours = next(r for r in results if r.strategy == "specsweep")
    assert ours.runs and all(run.regret == pytest.approx(0.0) for run in ours.runs)
    note = PAIR.baseline_note()
    assert "above every one of the 12 speculative cells measured" in note
    assert "s4k8d16: 8104.5 tok/s" in note
