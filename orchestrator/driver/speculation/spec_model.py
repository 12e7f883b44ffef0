"""A speculation model learned from measured trials: per-position acceptance and the cost of a step.

What a speculative tree is worth at a concurrency level is the tokens one decode step yields per request
(the accept length) against what the step costs (SmartSpec's goodput; Sequoia sizes trees from the same
per-position acceptance). Both parts are fitted on the trials measured so far, from what every stage
records on real SGLang as on the simulator (accept length, output tok/s), never from the simulated profile:

- **Acceptance.** The accept length of a tree is 1 (the bonus token) plus the expected accepted depth, and
  that depth is a sum over the nodes the verify sees: the verify accepts a node exactly when the target's
  tokens follow its path, so ``accept = 1 + sum over verified nodes of P(path)``. Which nodes are verified
  is SGLang's rule (`eagle_utils.organize_draft_results`): a beam of top-k is expanded ``steps`` times
  (top-k nodes at depth 1, top-k x top-k children of the beam at every depth below), and the
  ``draft_tokens - 1`` most probable of those nodes are verified. So the budget, not only the shape,
  decides what a tree accepts: at top-k 3 and 3 steps, 3 verified nodes (draft tokens 4) are nearly a
  chain, 7 (draft tokens 8) reach the second candidate at two depths. Per node, the target's token at
  depth d is the draft's rank-r candidate with probability ``C_d(r) - C_d(r - 1)``, where
  ``C_d(r) = 1 - (1 - p0 * decay**(d-1)) * r**-gain`` is the chance that the draft's r best hold it (the
  first candidate's chance weakens along the draft; a wider candidate list helps with diminishing returns).
  The draft is taken as calibrated: the nodes SGLang keeps by draft score are the most probable ones.
  Why this form: it is the verify's own arithmetic with three parameters, a chain reduces to the familiar
  per-position chain ``1 + sum_i prod_{j<=i} p_j``, and unlike a per-position family that only sees top-k
  it tells (3, 3, 4) from (3, 3, 8) (published: 1.99 and 2.20 on one draft). On the published SGLang tree
  tables it fits within 2 % mean (tests/driver/proposal/test_published_acceptance.py). ``p0``, ``decay``
  and ``gain`` are fitted by least squares on the measured accept lengths over a grid (each tree's
  accept length at every grid point is computed once and cached, so the leave-one-out refits are sums);
  a draft whose second candidate would be likelier than its first is excluded, and a weak pull towards
  a typical EAGLE-3 draft decides what the trees measured cannot (``gain`` before a top-k > 1 tree).
  The per-position form ``p_i = 1 - (1 - p0 * decay**i) * topk**-gain`` (the full top-k verified at every
  depth, the budget unseen) is kept as a second candidate: it misses the published tree tables by about
  5 %, but a node whose acceptance does not depend on the budget (the simulated profiles) follows it. Of
  the two, the one whose leave-one-out accept lengths miss least is used (`choose_form`), the
  verified-nodes form until a tree can be left out and on a tie (on chains they are the same).
- **Step cost.** One stage's effective step is ``c * accept_length / tok_s`` seconds at concurrency c
  (the batch's tokens per step over its rate: prefill is folded in). It is fitted, non-negative, as a
  per-level intercept (the target's fixed cost and that level's prefill share) plus
  ``verify * c * draft_tokens`` (the target verifies every tree token of every request) plus
  ``draft * steps`` plus ``draft_tok * c * steps * topk`` (each draft step runs over top-k candidates).

A tree's predicted tok/s at level c is ``c * accept_length / step``; its objective the best level's. How
far to trust that is measured, not assumed: the leave-one-out error of the fit over the measured trees
(`loo_error`), and None (no error, so no trust) until a fit can leave a tree out.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

import numpy as np
from scipy.optimize import nnls

from orchestrator.config.draft_tree import DraftTree


class AcceptanceForm(StrEnum):
    BUDGET = "verified nodes"  # the draft-token budget picks the nodes verified (SGLang's rule)
    PER_POSITION = "per position"  # every depth verifies the full top-k: the budget is not seen


# A typical EAGLE-3 draft (SGLang's Llama-3 heads accept 0.6-0.8 at the first position, falling by a few
# tenths along the chain; the published SGLang tree tables fit a gain of about 0.6 in the verified-nodes
# form): only what the measured trees cannot decide is pulled towards it, weakly.
TYPICAL = {AcceptanceForm.BUDGET: (0.7, 0.85, 0.6), AcceptanceForm.PER_POSITION: (0.7, 0.85, 0.2)}
PULL = 1e-3
_P0 = np.linspace(0.01, 0.99, 99)
_DECAY = np.linspace(0.4, 1.0, 31)
_GAIN = np.linspace(0.0, 1.5, 31)
_SHAPE = (len(_P0), len(_DECAY), len(_GAIN))
_GRID_P0, _GRID_DECAY, _GRID_GAIN = (g.ravel() for g in np.meshgrid(_P0, _DECAY, _GAIN, indexing="ij"))
# The grid is evaluated in chunks so that a large published tree (hundreds of candidate nodes) stays small.
_CHUNK = 8192
MIN_TREES = 3  # the model predicts once this many trees are measured


def _rank_probs(first: np.ndarray, gain: np.ndarray, topk: int) -> np.ndarray:
    """P(the target's token is the draft's rank-r candidate), r = 1..topk, shape (points, topk)."""
    ranks = np.arange(1, topk + 1, dtype=float)
    held = 1.0 - (1.0 - first)[:, None] * ranks[None, :] ** (-gain[:, None])
    return np.diff(held, axis=1, prepend=0.0)


def _budget_accept(p0: np.ndarray, decay: np.ndarray, gain: np.ndarray, tree: DraftTree) -> np.ndarray:
    """1 + the path probabilities of the ``draft_tokens - 1`` most probable nodes of SGLang's beam
    expansion, at each (p0, decay, gain) (the module's docstring)."""
    budget = tree.draft_tokens - 1
    if budget <= 0 or tree.steps <= 0:
        return np.ones_like(p0)
    k = tree.topk
    beam = _rank_probs(p0, gain, k)
    nodes = [beam]
    for depth in range(1, tree.steps):
        below = _rank_probs(p0 * decay**depth, gain, k)
        children = (beam[:, :, None] * below[:, None, :]).reshape(len(p0), -1)
        nodes.append(children)
        # the beam goes on from the top-k children, as SGLang's select_top_k_tokens does
        beam = -np.partition(-children, k - 1, axis=1)[:, :k] if children.shape[1] > k else children
    every = np.concatenate(nodes, axis=1)
    kept = min(budget, every.shape[1])
    best = -np.partition(-every, kept - 1, axis=1)[:, :kept] if kept < every.shape[1] else every
    return np.asarray(1.0 + best.sum(axis=1))


def _position_accept(p0: np.ndarray, decay: np.ndarray, gain: np.ndarray, tree: DraftTree) -> np.ndarray:
    """``1 + sum_i prod_{j<=i} p_j`` with ``p_i = 1 - (1 - p0 * decay**i) * topk**-gain`` over
    ``min(steps, draft_tokens - 1)`` positions: the full top-k at every depth, the budget unseen."""
    shrink = float(tree.topk) ** (-gain) if tree.topk > 1 else np.ones_like(gain)
    total, chain = np.ones_like(p0), np.ones_like(p0)
    for i in range(tree.max_accepted):
        chain = chain * (1.0 - (1.0 - p0 * decay**i) * shrink)
        total = total + chain
    return total


_FORMS = {AcceptanceForm.BUDGET: _budget_accept, AcceptanceForm.PER_POSITION: _position_accept}


@dataclass(frozen=True)
class Acceptance:
    p0: float
    decay: float
    gain: float
    form: AcceptanceForm = AcceptanceForm.BUDGET

    def accept_length(self, tree: DraftTree) -> float:
        one = np.array([self.p0]), np.array([self.decay]), np.array([self.gain])
        return float(_FORMS[self.form](*one, tree)[0])


@functools.lru_cache(maxsize=1024)
def _grid_accept_lengths(tree: DraftTree, form: AcceptanceForm) -> np.ndarray:
    """The accept length of ``tree`` at every (p0, decay, gain) of the grid, shape (P0, DECAY, GAIN).
    Cached: the leave-one-out refits and every later decision of a sweep reuse it (read-only)."""
    f = _FORMS[form]
    parts = [
        f(_GRID_P0[i : i + _CHUNK], _GRID_DECAY[i : i + _CHUNK], _GRID_GAIN[i : i + _CHUNK], tree)
        for i in range(0, len(_GRID_P0), _CHUNK)
    ]
    out = np.concatenate(parts).reshape(_SHAPE)
    out.setflags(write=False)
    return out


@functools.cache
def _prior_loss(form: AcceptanceForm) -> np.ndarray:
    t0, td, tg = TYPICAL[form]
    loss = PULL * (
        (_P0[:, None, None] - t0) ** 2 + (_DECAY[None, :, None] - td) ** 2 + (_GAIN[None, None, :] - tg) ** 2
    )
    if form is AcceptanceForm.BUDGET:
        # A calibrated draft ranks its likeliest candidate first: the second may not be likelier.
        second = (1.0 - _P0[:, None, None]) * (1.0 - 2.0 ** (-_GAIN[None, None, :]))
        loss = np.where(second > _P0[:, None, None], np.inf, loss)
    out = loss + np.zeros(_SHAPE)
    out.setflags(write=False)
    return out


def _at(index: int, form: AcceptanceForm) -> Acceptance:
    i, j, k = np.unravel_index(index, _SHAPE)
    return Acceptance(float(_P0[i]), float(_DECAY[j]), float(_GAIN[k]), form)


def fit_acceptance(
    samples: Sequence[tuple[DraftTree, float]], form: AcceptanceForm = AcceptanceForm.BUDGET
) -> Acceptance:
    """Least squares over the measured (tree, accept length) pairs, on the grid."""
    loss = _prior_loss(form).copy()
    for tree, accept in samples:
        loss += (_grid_accept_lengths(tree, form) - accept) ** 2
    return _at(int(np.argmin(loss)), form)


def acceptance_loo(
    samples: Sequence[tuple[DraftTree, float]], form: AcceptanceForm = AcceptanceForm.BUDGET
) -> list[float]:
    """Each tree's accept length predicted by a fit without it, relative to its own (signed), in the
    order given: the acceptance model's leave-one-out error alone (no step cost, no rates). A fit
    without one tree is the full loss less that tree's term, so the refits cost one sum."""
    terms = [(_grid_accept_lengths(tree, form) - accept) ** 2 for tree, accept in samples]
    total = _prior_loss(form) + sum(terms, np.zeros(_SHAPE))
    out = []
    for (tree, accept), term in zip(samples, terms, strict=True):
        fitted = _at(int(np.argmin(total - term)), form)
        out.append(fitted.accept_length(tree) / accept - 1.0)
    return out


def choose_form(samples: Sequence[tuple[DraftTree, float]]) -> AcceptanceForm:
    """The form whose leave-one-out accept lengths miss least (mean absolute); the verified-nodes form,
    SGLang's own rule, until a tree can be left out (more than `MIN_TREES` trees) and on a tie (on chains
    both forms are the same)."""
    if len(samples) <= MIN_TREES:
        return AcceptanceForm.BUDGET

    def miss(form: AcceptanceForm) -> float:
        return float(np.mean(np.abs(acceptance_loo(samples, form))))

    budget, position = miss(AcceptanceForm.BUDGET), miss(AcceptanceForm.PER_POSITION)
    return AcceptanceForm.PER_POSITION if position < budget - 1e-9 else AcceptanceForm.BUDGET


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


def accept_lengths(samples: Sequence[StageSample]) -> list[tuple[DraftTree, float]]:
    """Each measured tree's mean accept length over its stages."""
    by_tree: dict[DraftTree, list[float]] = {}
    for s in samples:
        by_tree.setdefault(s.tree, []).append(s.accept_length)
    return [(t, sum(v) / len(v)) for t, v in by_tree.items()]


def fit(samples: Sequence[StageSample], form: AcceptanceForm | None = None) -> SpecModel:
    """Acceptance and step cost fitted on ``samples``; the acceptance form chosen on them unless given."""
    accepts = accept_lengths(samples)
    acceptance = fit_acceptance(accepts, choose_form(accepts) if form is None else form)
    cost = fit_step_cost([(s.tree, s.concurrency, s.step_s) for s in samples])
    return SpecModel(acceptance, cost, tuple(sorted({s.concurrency for s in samples})))


def loo_error(samples: Sequence[StageSample], measured: dict[DraftTree, float]) -> float | None:
    """Root mean square relative error of each measured tree's objective predicted by a fit without it:
    how far the model is from a tree it has not seen. None until every such fit still holds `MIN_TREES`
    trees (a fit on fewer is underdetermined, and its error would be a guess, not a measurement)."""
    trees = sorted({s.tree for s in samples} & set(measured))
    if len(trees) <= MIN_TREES:
        return None
    # The form is chosen once, on every tree (choosing it again within each refit would multiply the
    # refits by the trees, for a choice that on the trees measured seldom changes).
    form = choose_form(accept_lengths(samples))
    errors = []
    for left_out in trees:
        rest = [s for s in samples if s.tree != left_out]
        predicted = fit(rest, form).objective(left_out)
        errors.append((predicted / measured[left_out] - 1.0) ** 2)
    return math.sqrt(sum(errors) / len(errors))
