"""What the policy believes of each untried tree: the model's prediction with an error, wider for a tree
outside the depths and widths the measured trees span (the model extrapolates there)."""

from __future__ import annotations

import pytest

from benchmarks.truth.cases import CASES, case_spec
from benchmarks.truth.oracle import Oracle
from orchestrator.config.draft_tree import DraftTree
from orchestrator.driver.proposal.policy import ProposalPolicy
from orchestrator.driver.proposal.prospects import predict_prospects
from orchestrator.driver.proposal.structure import fitting_config
from orchestrator.driver.speculation.predictions import stage_samples
from orchestrator.records import TrialRecord
from orchestrator.sim.profile import load_profile
from tests.driver.loop.test_driver_decisions import InProcessExecutor
from tests.driver.proposal.test_policy import _run


def test_a_tree_outside_the_measured_depths_and_widths_keeps_a_wider_error() -> None:
    """The first launches of a sweep's trees with 3 or 4 steps and top-k 1 or 4 (the 8B shape on one
    H200): every untried tree of 3-4 steps at top-k 1 or 4 is predicted with the model's leave-one-out
    error; a chain of 1 or 2 steps (shallower than any measured) and a top-k 2 tree (a width never
    measured) keep a wider one."""
    bench = CASES["h200-llama8b"]
    profile = load_profile(bench.name)
    spec = case_spec(bench, gpus=profile.gpu_count)
    sweep = _run(spec, InProcessExecutor(Oracle(spec, profile)))
    records: list[TrialRecord] = []
    measured: set[DraftTree] = set()
    for r in sweep.outcome.records:
        tree = DraftTree.of(r.result.config)
        if tree is not None and tree not in measured and tree.steps in (3, 4) and tree.topk in (1, 4):
            measured.add(tree)
            records.append(r)
    assert len(measured) >= 4  # more than the model's minimum: its error is its own leave-one-out
    policy = ProposalPolicy(spec)
    served = {r.result.config.mem_fraction_static for r in records}
    candidates = {
        tree: config
        for tree in policy.trees
        if tree not in measured
        and (config := fitting_config(policy.structure, tree, sweep.memory_model, served)) is not None
    }
    fitted = predict_prospects(records, stage_samples(records), candidates)
    assert fitted is not None
    relative = {p.tree: p.sd / p.mean for p in fitted[0]}
    inside = {t: e for t, e in relative.items() if t.steps in (3, 4) and t.topk in (1, 4)}
    outside = {t: e for t, e in relative.items() if t not in inside}
    assert inside and any(t.steps < 3 for t in outside) and any(t.topk == 2 for t in outside)
    error = min(inside.values())
    assert error > 0 and max(inside.values()) == pytest.approx(
        error
    )  # one error for every tree the trees span
    assert min(outside.values()) > 1.2 * error, (error, outside)
