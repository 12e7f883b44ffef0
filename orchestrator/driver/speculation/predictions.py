"""The speculation model's figures for the configurations a sweep measured: the trees and stages it is
fitted on (`measured_objectives`, `stage_samples`) and its figure for each measured configuration, with
its measured miss (`model_predictions`, a `Prediction` each).

Below both the proposal and the answer: the proposal predicts untried trees from the same samples
(`driver.proposal.prospects`), and the answer's ranking shrinks each configuration's centre toward its
`Prediction` (`driver.answer.ranking`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from orchestrator.config.draft_tree import DraftTree
from orchestrator.driver.speculation.spec_model import MIN_TREES, StageSample, fit, loo_error
from orchestrator.records import ServerConfig, TrialRecord, TrialStatus

# A model is never taken as closer than this to a configuration's true figure, however small its measured
# error: 1 % is about one GPU-bound launch's spread, so there a launch still counts as much as the model.
MODEL_ERROR_FLOOR = 0.01


@dataclass(frozen=True)
class Prediction:
    """A model's figure for one configuration, fitted on every launch of the sweep, and its measured miss.

    ``loo_error`` is the model's leave-one-out relative error against the measured configurations' medians,
    so it holds their launch noise too: ``noise_share`` is the mean of ``1 / launches`` over those medians,
    the share of one launch's variance that is in them."""

    tok_s: float
    loo_error: float
    noise_share: float = 1.0

    def error(self, launch_sd: float) -> float:
        """The model's own relative error: its measured miss less the launch noise in that miss."""
        own = self.loo_error**2 - self.noise_share * launch_sd**2
        return math.sqrt(max(MODEL_ERROR_FLOOR**2, own))


def measured_objectives(records: Sequence[TrialRecord]) -> dict[DraftTree, float]:
    """Each speculative tree's measured objective: the (upper) median over its ok launches."""
    by_tree: dict[DraftTree, list[float]] = {}
    for r in records:
        tree = DraftTree.of(r.result.config)
        if (
            tree is not None
            and r.objective is not None
            and not r.baseline
            and r.result.status is TrialStatus.OK
        ):
            by_tree.setdefault(tree, []).append(float(r.objective))
    return {t: sorted(v)[len(v) // 2] for t, v in by_tree.items()}


def stage_samples(records: Sequence[TrialRecord]) -> list[StageSample]:
    """Every measured stage of a speculative launch with an accept length (the baseline excluded)."""
    out = []
    for r in records:
        tree = DraftTree.of(r.result.config)
        if (
            tree is None
            or r.baseline
            or r.result.status is not TrialStatus.OK
            or r.result.config.speculative_adaptive
        ):
            continue
        for s in r.result.stages:
            if s.completed > 0 and s.output_tok_per_s > 0 and s.accept_length:
                out.append(StageSample(tree, s.concurrency, s.accept_length, s.output_tok_per_s))
    return out


def model_predictions(records: Sequence[TrialRecord]) -> dict[str, Prediction]:
    """The speculation model's figure for each measured speculative configuration (by its label), fitted on
    every measured stage, with the model's leave-one-out error; empty while that error cannot be measured.

    Only a tree measured at one configuration is predicted: the model knows trees, not memory flags, and a
    tree launched at two sets of flags (one throttling the workload) has two figures, one prediction."""
    samples = stage_samples(records)
    measured = measured_objectives(records)
    if len({s.tree for s in samples}) <= MIN_TREES:
        return {}
    loo = loo_error(samples, measured)
    if loo is None:
        return {}
    spec_model = fit(samples)
    configs: dict[DraftTree, set[ServerConfig]] = {}
    launches: dict[DraftTree, int] = {}
    for r in records:
        tree = DraftTree.of(r.result.config)
        if tree is None or r.baseline or r.objective is None or r.result.status is not TrialStatus.OK:
            continue
        configs.setdefault(tree, set()).add(r.result.config)
        launches[tree] = launches.get(tree, 0) + 1
    # The leave-one-out error compares each prediction with a tree's median: a share 1/n of one launch's
    # variance is in it, which the ranking takes out again with the calibrated noise.
    left_out = [t for t in measured if t in {s.tree for s in samples}]
    share = sum(1.0 / launches.get(t, 1) for t in left_out) / max(1, len(left_out))
    out = {}
    for tree, cs in configs.items():
        config = next(iter(cs))
        if len(cs) == 1 and not config.speculative_adaptive:
            out[config.label()] = Prediction(spec_model.objective(tree), loo, share)
    return out
