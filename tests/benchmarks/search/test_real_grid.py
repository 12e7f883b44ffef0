"""The measured H200 grid (tests/fixtures/sglang/0.5.17/llama8b-grid) as the replay reads it: the truth is
the best of the searched (speculative) space, a cell launched twice counts by its mean, the baseline
without speculation is reported beside it and never scored as a speculative cell."""

from __future__ import annotations

from dataclasses import replace

import pytest

from benchmarks.search.replay import replay
from benchmarks.truth.measured_grid import (
    GRID_FOLDER,
    GRID_SPEC,
    GRIDS,
    ReplayOracle,
    baseline_note,
    load_records,
)
from orchestrator.records import ServerConfig
from orchestrator.spec.sweep_spec import load_spec


def _config(fraction: float, graph_bs: int, running: int) -> ServerConfig:
    records = load_records(GRID_FOLDER)
    first = next(r.result.config for r in records if r.result.config.speculative_num_steps is not None)
    return replace(
        first, mem_fraction_static=fraction, cuda_graph_max_bs=graph_bs, max_running_requests=running
    )


def test_the_grid_is_complete_and_every_launch_started() -> None:
    records = load_records(GRID_FOLDER)
    assert len(records) == 16  # 13 cells, the baseline, and two cells launched again
    assert all(r.result.status.value == "ok" for r in records)
    assert sum(r.result.config.speculative_num_steps is None for r in records) == 1


def test_truth_is_the_speculative_best_by_its_mean_and_capped_cells_map() -> None:
    oracle = ReplayOracle(load_spec(GRID_SPEC), load_records(GRID_FOLDER))
    best = oracle.measured[_config(0.5, 256, 256)].objective
    # launched twice on the H200: 2807.6 and 2796.7 tok/s
    assert best == pytest.approx((2807.6 + 2796.7) / 2, abs=0.2)
    # graph bs 64 under max running 16 was not launched: SGLang captures graphs up to 16 there
    assert oracle.cell(_config(0.95, 64, 16)) == _config(0.95, 16, 16)
    assert "2908.6 tok/s" in baseline_note(GRID_FOLDER)


def test_replay_scores_against_the_speculative_space() -> None:
    best, results = replay(GRIDS["h200_8b"], seeds=2, budget=8)
    assert best == pytest.approx(2802.2, abs=0.2)  # not the 2908.6 of the baseline
    grid = next(r for r in results if r.strategy == "grid")
    assert all(run.regret < 0.02 for run in grid.runs)


def test_replayed_strategies_start_from_nothing() -> None:
    # The grid measured its cells as known-good configurations with a baseline first; a replayed
    # search must not be handed them (the product would launch the user's known-good cells first).
    from benchmarks.truth.measured_grid import same_start

    spec = same_start(load_spec(GRID_SPEC))
    assert spec.known_good == [] and not spec.budget.baseline and spec.budget.confirm_top > 0
