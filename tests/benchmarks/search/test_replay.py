"""Replaying the strategies on a measured grid: measured cells answer, and the rows join search.json."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from benchmarks.search.efficiency import Truth
from benchmarks.search.replay import replay, replay_rows
from benchmarks.truth.measured_grid import GRIDS, ReplayOracle, Unmeasured, load_records
from orchestrator.spec.search import make_config
from orchestrator.spec.sweep_spec import load_spec

pytestmark = pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")
ROOT = Path(__file__).resolve().parents[3]
SWEEP_RECORD = ROOT / "tests" / "fixtures" / "sglang" / "0.5.17" / "llama8b-sweep" / "records" / "0000.json"
GRID_SPEC = ROOT / "trials" / "h200-8b-grid.yaml"


def _grid_folder(tmp_path: Path) -> Path:
    """A measured grid in the product's record format, from one real 8B record: the objective grows with
    the fraction and the graph size, so (0.95, 256, 256) is the best cell."""
    base = json.loads(SWEEP_RECORD.read_text())
    folder = tmp_path / "grid" / "records"
    folder.mkdir(parents=True)
    spec = load_spec(GRID_SPEC)
    n = 0
    for mem in spec.search.mem_fraction_static.choices:  # type: ignore[union-attr]
        for gbs in (16, 64, 256):
            for mrr in (16, 256):
                if mrr == 16 and gbs != 16:
                    continue  # the same server as graph bs 16: not measured
                rec = json.loads(json.dumps(base))
                rec["number"] = n
                rec["result"]["config"].update(
                    mem_fraction_static=mem, cuda_graph_max_bs=gbs, max_running_requests=mrr,
                    speculative_num_steps=2, speculative_eagle_topk=1, speculative_num_draft_tokens=3,
                )  # fmt: skip
                scale = 1000.0 * mem + gbs + (0 if mrr == 16 else 300)
                for stage in rec["result"]["stages"]:
                    stage["output_tok_per_s"] = scale * stage["output_tok_per_s"] / rec["objective"]
                rec["objective"] = scale
                (folder / f"{n:04d}.json").write_text(json.dumps(rec))
                n += 1
    # the spec's baseline: the same server without speculation, at the first known-good's memory flags
    rec = json.loads(json.dumps(base))
    rec["number"], rec["baseline"], rec["objective"] = n, True, 900.0
    rec["result"]["config"].update(
        mem_fraction_static=0.5, cuda_graph_max_bs=16, max_running_requests=16,
        speculative_num_steps=None, speculative_eagle_topk=None, speculative_num_draft_tokens=None,
    )  # fmt: skip
    (folder / f"{n:04d}.json").write_text(json.dumps(rec))
    return folder.parent


def test_replay_answers_with_the_measured_cells(tmp_path: Path) -> None:
    folder = _grid_folder(tmp_path)
    records = load_records(folder)
    oracle = ReplayOracle(load_spec(GRID_SPEC), records)
    measured = make_config(0.8, 16, 16, 2, 1, 3)
    same = make_config(0.8, 256, 16, 2, 1, 3)  # graphs capped at max running 16: the graph-bs-16 server
    assert oracle.evaluate(same).objective == pytest.approx(oracle.evaluate(measured).objective or 0.0)
    assert oracle.evaluate(same).config == same
    truth = Truth(oracle, {measured: oracle.evaluate(measured).objective or 0.0})
    assert truth.get(same) == truth[measured]  # an answer is scored by the cell that answers for it
    with pytest.raises(Unmeasured):
        oracle.evaluate(make_config(0.8, 16, 16))  # the baseline was measured at 0.5 only
    best, results = replay(replace(GRIDS["h200_8b"], folder=folder), seeds=2, budget=4)
    assert best == pytest.approx(1000 * 0.95 + 256 + 300)
    by_name = {r.strategy: r for r in results}
    assert all(r.regret == 0.0 for r in by_name["grid"].runs)  # 0.5 % noise cannot hide a 2 % gap
    assert by_name["auto_benchmark"].error  # its bases without speculation were not measured
    assert by_name["random"].runs and not by_name["random"].error


def test_replay_rows_join_search_json(tmp_path: Path) -> None:
    folder = _grid_folder(tmp_path)
    rows, notes = replay_rows(replace(GRIDS["h200_8b"], folder=folder), seeds=2, budget=4)
    assert {r["set"] for r in rows} == {"real grid"} and {r["regime"] for r in rows} == {"gpu_bound"}
    assert "specsweep" in {r["strategy"] for r in rows} and any("auto_benchmark" in n for n in notes)
    assert replay_rows(replace(GRIDS["h200_8b"], folder=tmp_path / "nothing"))[0] == []
