"""A speculation model learned from measured trials: per-position acceptance and the cost of a step.

What a speculative tree is worth at a concurrency level is the tokens one decode step yields per request
(the accept length) against what the step costs (SmartSpec's goodput; Sequoia sizes trees from the same
per-position acceptance). Both parts are fitted on the trials measured so far, from what every stage
records on real SGLang as on the simulator (accept length, output tok/s), never from the simulated profile:

- **Acceptance.** Draft position i is accepted, given the earlier ones were, with probability
  ``1 - (1 - p0 * decay**i) * topk**-gain``: a chain that weakens along the draft, and that a wider tree
  (top-k) makes likelier to hold. The accept length is ``1 + sum_i prod_{j<=i} p_j`` over
  ``min(steps, draft_tokens - 1)`` positions. ``p0``, ``decay`` and ``gain`` are fitted by least squares
  on the measured accept lengths (a grid, then the fit is exact to its resolution; a weak pull towards a
  typical EAGLE-3 draft decides what the trees measured cannot, such as ``gain`` before a top-k > 1 tree).
- **Step cost.** One stage's effective step is ``c * accept_length / tok_s`` seconds at concurrency c
  (the batch's tokens per step over its rate: prefill is folded in). It is fitted, non-negative, as a
  per-level intercept (the target's fixed cost and that level's prefill share) plus
  ``verify * c * draft_tokens`` (the target verifies every tree token of every request) plus
  ``draft * steps`` plus ``draft_tok * c * steps * topk`` (each draft step runs over top-k candidates).

A tree's predicted tok/s at level c is ``c * accept_length / step``; its objective the best level's. How
far to trust that is measured, not assumed: the leave-one-out error of the fit over the measured trees.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import nnls

from orchestrator.draft_tree import DraftTree

# A typical EAGLE-3 draft (SGLang's Llama-3 heads accept 0.6-0.8 at the first position, falling by a few
# tenths along the chain): only what the measured trees cannot decide is pulled towards it, weakly.
TYPICAL = (0.7, 0.85, 0.2)
PULL = 1e-3
_P0 = np.linspace(0.02, 0.99, 50)
_DECAY = np.linspace(0.4, 1.0, 31)
_GAIN = np.linspace(0.0, 1.5, 16)
MIN_TREES = 3  # the model predicts once this many trees are measured
# A fit on fewer than MIN_TREES trees is underdetermined, so the leave-one-out error is only measured from
# MIN_TREES + 1 trees; until then the model's error is taken as this (on the benchmark's profiles a fit on
# three trees predicts the others within 1-3 %: this is a cautious guess, replaced as soon as measured).
PRIOR_MODEL_ERROR = 0.08


@dataclass(frozen=True)
class Acceptance:
    p0: float
    decay: float
    gain: float

    def position_probs(self, tree: DraftTree) -> list[float]:
        shrink = tree.topk ** (-self.gain) if tree.topk > 1 else 1.0
        return [1.0 - (1.0 - self.p0 * self.decay**i) * shrink for i in range(tree.max_accepted)]

    def accept_length(self, tree: DraftTree) -> float:
        total, chain = 1.0, 1.0
        for p in self.position_probs(tree):
            chain *= p
            total += chain
        return total


def _grid_accept_lengths(tree: DraftTree) -> np.ndarray:
    """The accept length of ``tree`` at every (p0, decay, gain) of the grid, shape (P0, DECAY, GAIN)."""
    p0 = _P0[:, None, None]
    decay = _DECAY[None, :, None]
    shrink = tree.topk ** (-_GAIN[None, None, :]) if tree.topk > 1 else np.ones((1, 1, len(_GAIN)))
    total = np.ones((len(_P0), len(_DECAY), len(_GAIN)))
    chain = np.ones_like(total)
    for i in range(tree.max_accepted):
        chain = chain * (1.0 - (1.0 - p0 * decay**i) * shrink)
        total = total + chain
    return total


def fit_acceptance(samples: Sequence[tuple[DraftTree, float]]) -> Acceptance:
    """Least squares over the measured (tree, accept length) pairs, on the grid."""
    loss = np.zeros((len(_P0), len(_DECAY), len(_GAIN)))
    for tree, accept in samples:
        loss += (_grid_accept_lengths(tree) - accept) ** 2
    t0, td, tg = TYPICAL
    loss += PULL * (
        (_P0[:, None, None] - t0) ** 2 + (_DECAY[None, :, None] - td) ** 2 + (_GAIN[None, None, :] - tg) ** 2
    )
    i, j, k = np.unravel_index(int(np.argmin(loss)), loss.shape)
    return Acceptance(float(_P0[i]), float(_DECAY[j]), float(_GAIN[k]))


@dataclass(frozen=True)
class StepCost:
    """Seconds of one decode step (draft + verify) at a concurrency level."""

    intercept: dict[int, float]  # per concurrency level
    verify_per_token: float  # x concurrency x draft tokens
    draft_step: float  # x steps
    draft_per_token: float  # x concurrency x steps x top-k

    def step_s(self, tree: DraftTree, concurrency: int) -> float:
        base = self.intercept.get(concurrency)
        if base is None:  # a level never measured: the nearest measured one's fixed cost
            base = self.intercept[min(self.intercept, key=lambda c: abs(c - concurrency))]
        c = concurrency
        return (
            base
            + self.verify_per_token * c * tree.draft_tokens
            + self.draft_step * tree.steps
            + self.draft_per_token * c * tree.steps * tree.topk
        )


def _features(tree: DraftTree, concurrency: int, levels: Sequence[int]) -> list[float]:
    c = concurrency
    return [
        *(1.0 if c == lv else 0.0 for lv in levels),
        c * tree.draft_tokens,
        float(tree.steps),
        c * tree.steps * tree.topk,
    ]


def fit_step_cost(samples: Sequence[tuple[DraftTree, int, float]]) -> StepCost:
    """Non-negative least squares over (tree, concurrency, step seconds), relative errors weighted alike."""
    levels = sorted({c for _, c, _ in samples})
    a = np.array([_features(t, c, levels) for t, c, _ in samples])
    y = np.array([s for _, _, s in samples])
    w = 1.0 / y  # a level's steps may be ten times another's: fit each relative to its size
    coef, _ = nnls(a * w[:, None], y * w)
    n = len(levels)
    return StepCost(
        {lv: float(coef[i]) for i, lv in enumerate(levels)},
        float(coef[n]),
        float(coef[n + 1]),
        float(coef[n + 2]),
    )


@dataclass(frozen=True)
class StageSample:
    """What one measured stage says about its tree: the accept length and the rate at one level."""

    tree: DraftTree
    concurrency: int
    accept_length: float
    tok_s: float

    @property
    def step_s(self) -> float:
        return self.concurrency * self.accept_length / self.tok_s


@dataclass(frozen=True)
class SpecModel:
    acceptance: Acceptance
    cost: StepCost
    levels: tuple[int, ...]

    def tok_s(self, tree: DraftTree, concurrency: int) -> float:
        step = self.cost.step_s(tree, concurrency)
        return concurrency * self.acceptance.accept_length(tree) / step if step > 0 else math.inf

    def objective(self, tree: DraftTree) -> float:
        """The tree's predicted figure: its best level's tok/s, as the objective takes the best stage."""
        return max(self.tok_s(tree, c) for c in self.levels)


def fit(samples: Sequence[StageSample]) -> SpecModel:
    by_tree: dict[DraftTree, list[float]] = {}
    for s in samples:
        by_tree.setdefault(s.tree, []).append(s.accept_length)
    acceptance = fit_acceptance([(t, sum(v) / len(v)) for t, v in by_tree.items()])
    cost = fit_step_cost([(s.tree, s.concurrency, s.step_s) for s in samples])
    return SpecModel(acceptance, cost, tuple(sorted({s.concurrency for s in samples})))


def loo_error(samples: Sequence[StageSample], measured: dict[DraftTree, float]) -> float | None:
    """Root mean square relative error of each measured tree's objective predicted by a fit without it
    (`PRIOR_MODEL_ERROR` until every fit can leave one out of `MIN_TREES` + 1 trees; None below
    `MIN_TREES`): how far the model is from a tree it has not seen."""
    trees = sorted({s.tree for s in samples} & set(measured))
    if len(trees) < MIN_TREES:
        return None
    if len(trees) <= MIN_TREES:
        return PRIOR_MODEL_ERROR
    errors = []
    for left_out in trees:
        rest = [s for s in samples if s.tree != left_out]
        predicted = fit(rest).objective(left_out)
        errors.append((predicted / measured[left_out] - 1.0) ** 2)
    return math.sqrt(sum(errors) / len(errors)) if errors else None
