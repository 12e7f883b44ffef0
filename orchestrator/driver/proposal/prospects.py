"""What the proposal policy believes of each untried tree (`Prospect`): the speculation model's
predicted objective and its error, the model's leave-one-out miss against the launches
(`predict_prospects`), from the measured trees and stages (`driver.speculation.predictions`); and how far
a tree is from those tried (`spread`), which coverage maximises."""

from __future__ import annotations

import logging
import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from orchestrator.config.draft_tree import DraftTree
from orchestrator.driver.speculation.predictions import measured_objectives
from orchestrator.driver.speculation.spec_model import MIN_TREES, SpecModel, StageSample, fit, loo_error
from orchestrator.records import ServerConfig, TrialRecord

log = logging.getLogger(__name__)

Z95 = 1.645  # one-sided 95 %: a tree is ruled out when even this optimistic a figure misses the leader
NOVELTY = 0.5  # the model's error is taken this much larger for a tree outside the measured depths/widths


@dataclass(frozen=True)
class Prospect:
    tree: DraftTree
    config: ServerConfig
    mean: float
    sd: float  # absolute

    def upper(self) -> float:
        return self.mean + Z95 * self.sd

    def gain(self, best: float) -> float:
        """Expected improvement over ``best`` under a normal belief."""
        if self.sd <= 0:
            return max(0.0, self.mean - best)
        z = (self.mean - best) / self.sd
        pdf = math.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)
        cdf = 0.5 * (1 + math.erf(z / math.sqrt(2)))
        return (self.mean - best) * cdf + self.sd * pdf


def spread(tree: DraftTree, others: Collection[DraftTree], scale: tuple[float, float, float]) -> float:
    """Distance to the nearest tree already chosen, over depth, log-width and tree size."""
    if not others:
        return math.inf

    def coords(t: DraftTree) -> tuple[float, float, float]:
        return (t.steps / scale[0], math.log2(t.topk) / scale[1], t.draft_tokens / scale[2])

    a = coords(tree)
    return min(math.dist(a, coords(o)) for o in others)


def predict_prospects(
    records: Sequence[TrialRecord],
    samples: Sequence[StageSample],
    candidates: dict[DraftTree, ServerConfig],
    leader_noise: float = 0.0,
) -> tuple[list[Prospect], SpecModel, float] | None:
    """Each candidate's predicted objective and its absolute error, the model, and the model's
    measured (leave-one-out) error; None while that error cannot be measured."""
    measured = measured_objectives(records)
    if len({s.tree for s in samples}) < MIN_TREES:
        return None
    spec_model: SpecModel = fit(samples)
    loo = loo_error(samples, measured)
    if loo is None:
        return None
    steps = {s.tree.steps for s in samples}
    widths = {s.tree.topk for s in samples}
    out = []
    for tree, config in candidates.items():
        outside = tree.steps > max(steps) or tree.steps < min(steps) or tree.topk not in widths
        # The leave-one-out error compares each prediction with one noisy launch: it holds that
        # launch's noise already. What it does not hold is the noise of the figure a prospect is
        # compared with (the leader's median), so that is added, independent of the model's miss.
        rel = math.hypot(loo * (1 + (NOVELTY if outside else 0.0)), leader_noise)
        mean = spec_model.objective(tree)
        out.append(Prospect(tree, config, mean, rel * mean))
    log.debug("speculation model: leave-one-out error %.2f %% over %d trees", 100 * loo, len(measured))
    return out, spec_model, loo
