"""Speed and acceptance as measured, not as a formula: the simulated node told the truth.

The parametric profile (``sim.speed``) draws each draft position's acceptance from a decaying chain and
sleeps a linear cost per step; the proposal policy fits the same families, so a benchmark on such
profiles scores how well the policy recovers its own model. A profile can instead carry:

- ``measured_steps``: the seconds of one decode step per tree (``s3k1d4``, or ``none`` for the server
  without speculation) and running batch, as measured on real hardware. Between two measured batches the
  cost is interpolated linearly; outside them it holds the nearest measured one (a batch is never
  extrapolated), and a tree that was not measured is refused, not guessed.
- ``accept_table``: mean accept lengths per tree (bonus token included, as SGLang's "accept len"); where
  a source gives several batches, the lightest load's figure answers for all.

Nothing here is fitted: a measured cell is used as it is. A table's accept length becomes per-position
probabilities of one constant ``p`` (``1 + p + p**2 + ... = accept``), so the server's draws average to it.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field

from orchestrator.config.draft_tree import DraftTree
from orchestrator.errors import SpecsweepError

NO_TREE = "none"  # the key of the server without speculation


class StepCell(BaseModel):
    """One measured decode step: a tree at a running batch."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tree: str
    """The tree's label (``s3k1d4``), or ``none`` for the server without speculation."""
    batch: int = Field(ge=1)
    """Requests running in the step (the stage's concurrency, capped by max running requests)."""
    step_s: float = Field(gt=0)
    """Seconds of one step: one forward without speculation; draft steps plus verify with it."""


class AcceptCell(BaseModel):
    """One published accept length."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tree: str
    accept_length: float = Field(ge=1)
    batch: int | None = Field(default=None, ge=1)
    """The batch the source measured at; None: the source gives no batch (one value for all)."""


class UnmeasuredTree(SpecsweepError, ValueError):
    """A launch asks for a tree the profile's table does not hold."""


def tree_key(tree: DraftTree | None) -> str:
    return NO_TREE if tree is None else tree.label()


def _by_batch(cells: Sequence[StepCell], key: str) -> list[tuple[int, float]]:
    points = sorted((c.batch, c.step_s) for c in cells if c.tree == key)
    if not points:
        known = sorted({c.tree for c in cells})
        raise UnmeasuredTree(f"no measured step for {key}: the profile measured {', '.join(known)}")
    return points


def measured_step_s(cells: Sequence[StepCell], tree: DraftTree | None, batch: int) -> float:
    """One step's seconds at ``batch``: a measured cell, linear between two, the nearest outside them."""
    points = _by_batch(cells, tree_key(tree))
    batches = [b for b, _ in points]
    if batch <= batches[0]:
        return points[0][1]
    if batch >= batches[-1]:
        return points[-1][1]
    i = bisect.bisect_left(batches, batch)
    (b0, t0), (b1, t1) = points[i - 1], points[i]
    return t0 + (t1 - t0) * (batch - b0) / (b1 - b0)


def table_accept(cells: Sequence[AcceptCell], tree: DraftTree) -> float:
    """The table's accept length for ``tree``: at the lightest load the source measured. Acceptance is
    the draft's, not the batch's (AngelSlim's 4/4/16 gave 2.54-2.58 from batch 1 to 64), so one figure
    serves every batch; the rows' batches stay for provenance."""
    key = tree_key(tree)
    rows = [c for c in cells if c.tree == key]
    if not rows:
        known = sorted({c.tree for c in cells})
        raise UnmeasuredTree(f"no published accept length for {key}: the table holds {', '.join(known)}")
    return min(rows, key=lambda r: r.batch or 0).accept_length


def chain_probs(accept: float, positions: int) -> list[float]:
    """Per-position acceptance of one constant ``p`` whose chain averages ``accept`` tokens a verify.

    ``1 + p + ... + p**positions`` grows with ``p`` from 1 to ``positions + 1``, so bisection finds it; an
    accept length above what the tree can give saturates at ``p = 1``.
    """
    if positions <= 0:
        return []
    target = min(max(accept, 1.0), positions + 1.0)

    def mean(p: float) -> float:
        return sum(p**i for i in range(positions + 1))

    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if mean(mid) < target:
            lo = mid
        else:
            hi = mid
    return [(lo + hi) / 2] * positions


def step_from_wave(wave_s: float, accept: float, output_len: int, prefill_s: float) -> float:
    """The step a measured wave implies, read back through the simulator's own timing of a stage.

    A stage runs its requests in waves of the running batch: a prefill of the wave's prompts
    (``prefill_s``), then ``(output_len - 1) / accept`` steps; the step is what is left of the wave after
    the prefill. (Not from the stage's tok/s: the client's steady figure is not one wave's rate,
    `benchmarks.truth.measured_steps.wave_s`.)
    """
    steps = max(1.0, (output_len - 1) / accept)
    step = (wave_s - prefill_s) / steps
    if step <= 0:
        raise ValueError(
            f"a wave of {wave_s:.3f} s leaves no time for its steps after a {prefill_s:.3f} s prefill: "
            "the profile's prefill figures are too slow for this measurement"
        )
    return step
