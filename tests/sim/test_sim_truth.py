"""The simulated node told the truth: measured H200 step costs and published accept lengths.

The H200 cells are the product's own records of trials/h200-8b-trees.yaml and its two further parts
(fixtures "llama8b-trees", "llama8b-trees-2" and "llama8b-trees-3"); the profile `h200-llama8b-measured` is
derived from them and must stay so.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from benchmarks.truth.measured_steps import MEASURED_PROFILE, SPEC, measured_cells, profile_mapping
from benchmarks.truth.oracle import Oracle
from orchestrator.config.draft_tree import DraftTree
from orchestrator.records import ServerConfig
from orchestrator.sim.profile import PROFILE_DIR, load_profile
from orchestrator.sim.speed import SpeedModel, expected_accept_length, position_probs
from orchestrator.sim.truth import (
    AcceptCell,
    StepCell,
    UnmeasuredTree,
    chain_probs,
    measured_step_s,
    table_accept,
    tree_key,
)
from orchestrator.spec.sweep_spec import Backend, SimulatedSpec, load_spec

CELLS = [
    StepCell(tree="s3k1d4", batch=8, step_s=0.007),
    StepCell(tree="s3k1d4", batch=32, step_s=0.011),
    StepCell(tree="none", batch=8, step_s=0.005),
]


def test_a_measured_step_is_used_as_measured_and_interpolated_between_measured_batches_only() -> None:
    tree = DraftTree(3, 1, 4)
    assert measured_step_s(CELLS, tree, 8) == 0.007
    assert measured_step_s(CELLS, tree, 32) == 0.011
    assert measured_step_s(CELLS, tree, 20) == pytest.approx(0.009)
    # Outside the measured batches the nearest one holds: never extrapolated.
    assert measured_step_s(CELLS, tree, 1) == 0.007
    assert measured_step_s(CELLS, tree, 64) == 0.011
    assert measured_step_s(CELLS, None, 32) == 0.005


def test_a_tree_the_table_does_not_hold_is_refused_not_guessed() -> None:
    with pytest.raises(UnmeasuredTree, match=r"s4k2d8.*s3k1d4"):
        measured_step_s(CELLS, DraftTree(4, 2, 8), 8)
    with pytest.raises(UnmeasuredTree, match="no published accept length for s2k1d3"):
        table_accept([AcceptCell(tree="s3k1d4", accept_length=2.0)], DraftTree(2, 1, 3))


def test_the_lightest_published_load_answers_for_every_batch() -> None:
    table = [
        AcceptCell(tree="s4k4d16", accept_length=2.578, batch=8),
        AcceptCell(tree="s4k4d16", accept_length=2.542, batch=1),
        AcceptCell(tree="s4k4d16", accept_length=2.56, batch=32),
    ]
    assert table_accept(table, DraftTree(4, 4, 16)) == 2.542


@pytest.mark.parametrize("accept", [1.0, 1.042, 1.86, 2.2, 3.2])
def test_a_published_accept_length_is_what_the_server_draws_on_average(accept: float) -> None:
    tree = DraftTree(8, 8, 60)
    profile = load_profile(
        {"base": "h200-llama8b", "accept_table": [{"tree": tree.label(), "accept_length": accept}]}
    )
    probs = position_probs(profile, tree)
    assert len(probs) == tree.max_accepted
    assert expected_accept_length(probs) == pytest.approx(accept, abs=1e-9)
    # A broken draft is still broken, whatever the table says.
    assert expected_accept_length(position_probs(profile, tree, broken=True)) == 1.0


def test_an_accept_length_beyond_what_the_tree_holds_saturates() -> None:
    assert chain_probs(9.0, 3) == [pytest.approx(1.0)] * 3


def test_the_measured_profile_is_the_records_of_the_h200_sweep() -> None:
    """Written by `python -m benchmarks.truth.measured_steps` from the fixtures; a hand edit or a new record
    fails."""
    on_disk = yaml.safe_load((PROFILE_DIR / f"{MEASURED_PROFILE}.yaml").read_text())
    assert on_disk == yaml.safe_load(yaml.safe_dump(profile_mapping(measured_cells())))
    trees = {tree_key(c.tree) for c in measured_cells()}
    assert len(trees) == 17  # the server without speculation and 16 trees
    assert {"none", "s3k3d4", "s3k3d8", "s8k8d60", "s1k1d2", "s7k1d8"} <= trees
    # the third part: the top-k 2 trees, the tight 3/4/4 and the 4-step chain, at both batches
    third = [c for c in measured_cells() if c.source.startswith("llama8b-trees-3/")]
    assert {(tree_key(c.tree), c.batch) for c in third} == {
        (t, b) for t in ("s3k2d7", "s2k2d4", "s3k4d4", "s4k1d5") for b in (8, 32)
    }
    # the grid the step costs span: steps 1-8, top-k 1, 2, 3, 4 and 8, tight and roomy budgets
    spec_trees = [c.tree for c in measured_cells() if c.tree is not None]
    assert {t.topk for t in spec_trees} == {1, 2, 3, 4, 8}
    assert {t.steps for t in spec_trees} == {1, 2, 3, 4, 5, 6, 7, 8}
    assert any(t.draft_tokens < t.steps * t.topk / 2 for t in spec_trees)  # tight: 3/4/4, 3/8/10
    assert any(t.draft_tokens == t.steps * t.topk for t in spec_trees)  # roomy: 4/4/16


def _replay_profile(extra: dict[str, Any] | None = None) -> dict[str, Any]:
    trees = {tree_key(c.tree) for c in measured_cells()} - {"none"}
    return {
        "base": MEASURED_PROFILE,
        "accept_table": [{"tree": t, "accept_length": 1.0} for t in sorted(trees)],
        **(extra or {}),
    }


def _config(tree: DraftTree | None) -> ServerConfig:
    if tree is None:
        return ServerConfig(0.85, 32, 32)
    return ServerConfig(0.85, 32, 32, tree.steps, tree.topk, tree.draft_tokens)


def test_the_measured_cells_replay_within_3_percent() -> None:
    """Given the H200's step costs and acceptance 1.0, every measured stage's tok/s comes back (the
    oracle's stage timing: what the search benchmark scores with)."""
    spec = load_spec(SPEC).model_copy(
        update={"backend": Backend.SIMULATED, "simulated": SimulatedSpec(profile=MEASURED_PROFILE)}
    )
    oracle = Oracle(spec, load_profile(_replay_profile()))
    for cell in measured_cells():
        stage = next(s for s in oracle.evaluate(_config(cell.tree)).stages if s.concurrency == cell.batch)
        assert stage.output_tok_per_s == pytest.approx(cell.client_tok_s, rel=0.03), (
            tree_key(cell.tree),
            cell.batch,
        )


def test_a_table_profile_steps_by_its_measurement_not_by_the_formula() -> None:
    profile = load_profile(MEASURED_PROFILE)
    formula = load_profile("h200-llama8b")
    tree = DraftTree(8, 8, 60)
    measured = SpeedModel(profile, 1, tree, (8, 16, 32)).step_time(32)
    assert measured == pytest.approx(
        next(c.step_s for c in profile.measured_steps or () if c.tree == "s8k8d60" and c.batch == 32)
    )
    assert measured != pytest.approx(SpeedModel(formula, 1, tree, (8, 16, 32)).step_time(32), rel=0.05)
    # Above the captured sizes the batch runs without a graph, and costs the profile's eager factor.
    assert SpeedModel(profile, 1, tree, (8, 16)).step_time(32) > measured


def test_the_oracle_calls_a_stage_steady_where_the_h200_client_did() -> None:
    """The client extends a stage to `min_stage_s` (10 s here): s3k1d4 at 32 ran 192 requests (6 waves)
    and had a steady window on the H200, s4k4d16 at 32 needed no extension for its 96 (3 waves, 11.5 s)
    and had none; every stage at concurrency 8 (12 waves) was steady."""
    spec = load_spec(SPEC).model_copy(
        update={"backend": Backend.SIMULATED, "simulated": SimulatedSpec(profile=MEASURED_PROFILE)}
    )
    oracle = Oracle(spec, load_profile(_replay_profile()))
    chain8, chain32 = oracle.evaluate(_config(DraftTree(3, 1, 4))).stages
    wide8, wide32 = oracle.evaluate(_config(DraftTree(4, 4, 16))).stages
    assert chain8.steady and chain32.steady and wide8.steady
    assert not wide32.steady
