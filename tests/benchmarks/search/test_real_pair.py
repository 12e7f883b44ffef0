"""The real pair's measured grid (tests/fixtures/sglang/0.5.17/smollm2-chat-h100) as the replay reads it: its
space is exactly the 16 launched trees, each measured tree answers with its records' objective, a tree not
measured raises, a grid still partial is replayed on its largest complete part, and every strategy is
replayed against the best tree of that part. Read from whatever records the folder holds."""

from __future__ import annotations

import json
import statistics
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from benchmarks.launches.noisy import Launcher
from benchmarks.search.efficiency import SearchSettings, strategies
from benchmarks.search.replay import replay_rows
from benchmarks.truth.measured_grid import GRIDS, ReplayOracle, Unmeasured, load_records
from benchmarks.truth.oracle import Evaluation
from orchestrator.driver.answer.noise import Regime
from orchestrator.driver.search.space import space_configs
from orchestrator.records import ServerConfig
from orchestrator.spec.search import make_config
from orchestrator.spec.sweep_spec import load_spec

pytestmark = pytest.mark.filterwarnings(
    "ignore::optuna.exceptions.ExperimentalWarning", "ignore::FutureWarning"
)
PAIR = GRIDS["real_pair_machines"]  # the pair's first grid, 16 trees over five machines
TREES = "smollm2-chat-h100 (measured, five machines)"
WITH_BASELINE = "smollm2-chat-h100 (measured, five machines, with the baseline)"


def _tree_means(folder: Path) -> dict[ServerConfig, float]:
    """Each measured tree's objective as its records hold it (the mean of its launches)."""
    cells: dict[ServerConfig, list[float]] = {}
    for r in load_records(folder):
        if r.objective is not None and r.result.config.speculative_num_steps is not None:
            cells.setdefault(r.result.config, []).append(r.objective)
    return {c: statistics.fmean(v) for c, v in cells.items()}


def _baseline(folder: Path) -> float:
    base = [r.objective for r in load_records(folder) if r.result.config.speculative_num_steps is None]
    assert base and all(b is not None for b in base)
    return statistics.fmean(b for b in base if b is not None)


def test_the_replayed_space_is_the_launched_trees() -> None:
    launched = [k.to_config() for k in load_spec(PAIR.spec).known_good]
    space = space_configs(PAIR.load_spec().search)
    assert len(space) == 16 and set(space) == set(launched)


def test_each_measured_tree_answers_with_its_records_objective() -> None:
    means = _tree_means(PAIR.folder)
    assert len(means) >= 4  # 0001 s1k1d2, 0002 s2k1d3, 0003 s4k1d5, 0005 s1k2d3 at least
    oracle = ReplayOracle(PAIR.load_spec(), load_records(PAIR.folder), PAIR.profile)
    for config, mean in means.items():
        assert oracle.evaluate(config).objective == pytest.approx(mean, rel=1e-9)
    replayed = PAIR.replayed()
    for config in replayed.configs:
        assert replayed.oracle.evaluate(config).objective == pytest.approx(means[config], rel=1e-9)


def test_an_unmeasured_tree_raises() -> None:
    replayed = PAIR.replayed()
    with pytest.raises(Unmeasured):
        replayed.oracle.evaluate(make_config(0.85, 32, 32, 3, 1, 4))  # steps 3: never in the space
    means = _tree_means(PAIR.folder)
    missing = [c for c in space_configs(PAIR.load_spec().search) if c not in means]
    for config in missing:  # the space's trees no record holds yet
        with pytest.raises(Unmeasured):
            replayed.oracle.evaluate(config)


def test_a_partial_grid_replays_only_measured_trees() -> None:
    replayed = PAIR.replayed()
    means = _tree_means(PAIR.folder)
    space = space_configs(PAIR.load_spec().search)
    assert replayed.space_size == 16
    assert replayed.measured_in_space == sum(c in means for c in space)
    assert replayed.configs and set(replayed.configs) <= set(means)
    assert set(replayed.left_out) == {c for c in space if c in means} - set(replayed.configs)
    if replayed.complete:
        assert set(replayed.configs) == set(means) and replayed.note() == ""
    else:
        assert f"{replayed.measured_in_space} of the 16" in replayed.note()


def _record(template: dict[str, Any], config: ServerConfig, objective: float) -> dict[str, Any]:
    rec = json.loads(json.dumps(template))
    rec["result"]["config"].update(
        speculative_num_steps=config.speculative_num_steps,
        speculative_eagle_topk=config.speculative_eagle_topk,
        speculative_num_draft_tokens=config.speculative_num_draft_tokens,
    )
    for stage in rec["result"]["stages"]:
        stage["output_tok_per_s"] *= objective / rec["objective"]
    rec["objective"] = objective
    return rec


def test_a_complete_grid_is_replayed_whole_and_a_gap_narrows_it(tmp_path: Path) -> None:
    template = json.loads((PAIR.folder / "records" / "0001.json").read_text())
    trees = space_configs(PAIR.load_spec().search)
    for name, skip in (("whole", None), ("gap", make_config(0.85, 32, 32, 6, 8, 16))):
        folder = tmp_path / name / "records"
        folder.mkdir(parents=True)
        for n, tree in enumerate(trees):
            if tree != skip:
                rec = _record(template, tree, 1000.0 + n)
                (folder / f"{n:04d}.json").write_text(json.dumps(rec))
        replayed = replace(PAIR, folder=folder.parent).replayed()
        if skip is None:
            assert replayed.complete and set(replayed.configs) == set(trees)
        else:
            # without s6k8d16 the largest complete parts are steps {1, 2, 4, 6} x top-k {1, 2, 4} and
            # steps {1, 2, 4} x top-k {1, 2, 4, 8}, 12 trees each; neither holds the unmeasured tree
            assert len(replayed.configs) == 12 and skip not in replayed.configs
            assert replayed.measured_in_space == 15 and "15 of the 16" in replayed.note()


@pytest.fixture(scope="module")
def quick() -> tuple[list[dict[str, Any]], list[str]]:
    return replay_rows(PAIR, seeds=2)


def test_a_quick_replay_runs_every_strategy_under_both_regimes(
    quick: tuple[list[dict[str, Any]], list[str]],
) -> None:
    rows, notes = quick
    names = set(strategies(SearchSettings()))
    for regime in ("gpu_bound", "overhead_bound"):
        ran = {r["strategy"] for r in rows if r["regime"] == regime}
        unreplayable = {n for n in names if any(f"({regime}): {n} is not replayable" in x for x in notes)}
        assert ran | unreplayable == names and "specsweep" in ran
    assert {r["set"] for r in rows} == {"real_pair"}
    assert {r["case"] for r in rows} == {TREES, WITH_BASELINE}


def test_specsweep_is_scored_against_the_best_measured_tree(
    quick: tuple[list[dict[str, Any]], list[str]],
) -> None:
    rows, notes = quick
    means = _tree_means(PAIR.folder)
    replayed = PAIR.replayed()
    best = max(means[c] for c in replayed.configs)
    if replayed.complete:
        assert best == max(means.values())
    ours = [r for r in rows if r["strategy"] == "specsweep" and r["case"] == TREES]
    assert len(ours) == 2
    for row in ours:
        assert row["optimum_tok_s"] == pytest.approx(best, abs=0.01)
        assert row["seeds"] == 2 and all(0.0 <= run["regret"] < 1.0 for run in row["runs"])
    # the baseline without speculation is said with the records' figures beside the best tree, never scored
    base = _baseline(PAIR.folder)
    note = next(n for n in notes if "without speculation" in n)
    assert f"{base:.1f} tok/s" in note and f"{max(means.values()):.1f} tok/s" in note
    assert ("above every one" in note) == (base > max(means.values())), note


def test_the_users_question_holds_the_baseline_and_specsweep_as_shipped_answers_it(
    quick: tuple[list[dict[str, Any]], list[str]],
) -> None:
    """The view 'with the baseline': the server without speculation, measured at the trees' own memory
    flags, is in the optimum (the mean of its launches, above every tree on this pair), and specsweep runs
    as it ships, its baseline first: it answers with that server, as its real sweep of the pair did, while
    the peers that search the trees alone answer with a tree."""
    rows, _ = quick
    base = _baseline(PAIR.folder)
    view = {(r["regime"], r["strategy"]): r for r in rows if r["case"] == WITH_BASELINE}
    assert view and all(r["optimum_tok_s"] == pytest.approx(base, abs=0.01) for r in view.values())
    for regime in ("gpu_bound", "overhead_bound"):
        ours = view[(regime, "specsweep")]
        assert ours["hit_2pct"] == 1.0 and ours["regret_mean"] == 0.0
        assert ours["launches_to_2pct_median"] == 1  # the baseline is its first launch
        tree_best = max(_tree_means(PAIR.folder).values())
        assert view[(regime, "plain_tpe")]["regret_mean"] >= 100 * (1 - tree_best / base) - 1e-6


def test_a_grid_without_its_baseline_in_the_space_is_replayed_on_the_trees_alone() -> None:
    # the H200 8B grid measured its baseline at flags its space does not hold, with a draft that accepts
    # nothing: its one question is the speculative space
    assert GRIDS["h200_8b"].views() == (False,) and PAIR.views() == (False, True)
    assert PAIR.view_case(True) == WITH_BASELINE and PAIR.view_case(False) == TREES


def test_the_replay_draws_with_the_regime_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    import benchmarks.search.replay as replay_module

    seen: set[Regime] = set()

    class Recording(Launcher):
        def measure(self, config: ServerConfig) -> Evaluation:
            seen.add(self.regime)
            return super().measure(config)

    monkeypatch.setattr(replay_module, "Launcher", Recording)
    best, results = replay_module.replay(PAIR, seeds=1, budget=4, regime=Regime.OVERHEAD_BOUND)
    assert seen == {Regime.OVERHEAD_BOUND} and best > 0
    assert {r.strategy for r in results} == set(strategies(SearchSettings()))


def test_a_launch_stopped_under_it_measured_nothing(tmp_path: Path) -> None:
    # a node taken back while a tree loads leaves it interrupted; the tree is launched again later
    template = json.loads((PAIR.folder / "records" / "0001.json").read_text())
    folder = tmp_path / "grid" / "records"
    folder.mkdir(parents=True)
    again, once = make_config(0.85, 32, 32, 6, 1, 7), make_config(0.85, 32, 32, 6, 2, 13)
    for n, (tree, status, objective) in enumerate(
        [(again, "interrupted", 1.0), (again, "ok", 3000.0), (once, "interrupted", 1.0)]
    ):
        rec = _record(template, tree, objective)
        rec["result"]["status"] = status
        if status != "ok":
            rec["objective"], rec["result"]["stages"] = None, []
        (folder / f"{n:04d}.json").write_text(json.dumps(rec))
    oracle = ReplayOracle(PAIR.load_spec(), load_records(folder.parent), PAIR.profile)
    assert oracle.evaluate(again).objective == pytest.approx(3000.0)
    with pytest.raises(Unmeasured):
        oracle.evaluate(once)
