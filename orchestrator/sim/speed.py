"""How long a decode step takes and how many tokens it yields (pure functions).

A decode step is one target forward over every running request's tokens (one each, or the whole draft
tree when speculating) plus, when speculating, ``steps`` draft forwards over ``topk`` candidates and one
draft "extend" over the accepted tokens. A batch within the captured CUDA-graph sizes is padded to the
next captured size and replayed; above them it runs eagerly and slower. What each request gains per
step is ``1 + accepted drafts``, drawn from a per-position acceptance chain, so a broken draft gives
1.0 and costs the draft's time for nothing, and a large tree stops paying once the batch is compute
bound. The server sleeps for exactly these durations: the client measures real wall-clock throughput.
"""

from __future__ import annotations

import bisect
import random
from dataclasses import dataclass

from orchestrator.config.draft_tree import DraftTree
from orchestrator.sim.args import SimArgs
from orchestrator.sim.profile import SimProfile
from orchestrator.sim.truth import chain_probs, measured_step_s, table_accept


def broken_draft_reason(profile: SimProfile, args: SimArgs) -> str:
    """Why this launch's draft will accept nothing though nothing fails ('' when it is healthy)."""
    if not args.speculative:
        return ""
    if args.speculative_algorithm == "EAGLE" and "eagle3" in profile.draft_arch.lower():
        return "an EAGLE-3 draft run under --speculative-algorithm EAGLE (its fusion layer is skipped)"
    draft_format = args.draft_load_format or args.load_format
    if draft_format == "dummy":
        return "a dummy (random) draft has no d2t map"
    return ""


def position_probs(profile: SimProfile, tree: DraftTree, *, broken: bool = False) -> list[float]:
    """Acceptance probability of each draft position, given the previous ones were accepted."""
    if broken:
        return [0.0] * tree.max_accepted
    if profile.accept_table is not None:
        return chain_probs(table_accept(profile.accept_table, tree), tree.max_accepted)
    shrink = tree.topk ** (-profile.topk_gain) if tree.topk > 1 else 1.0
    probs = []
    p = profile.accept_p0
    for _ in range(tree.max_accepted):
        probs.append(1.0 - (1.0 - p) * shrink)
        p *= profile.accept_decay
    return probs


def expected_accept_length(probs: list[float]) -> float:
    """``1 + sum_i prod_{j<=i} p_j``: the bonus token plus the expected accepted prefix."""
    total, chain = 1.0, 1.0
    for p in probs:
        chain *= p
        total += chain
    return total


def sample_accepted(rng: random.Random, probs: list[float]) -> int:
    """Accepted drafts in one verify: the chain stops at the first rejected position."""
    n = 0
    for p in probs:
        if rng.random() >= p:
            break
        n += 1
    return n


@dataclass(frozen=True)
class SpeedModel:
    """Step and prefill durations for one running configuration."""

    profile: SimProfile
    tp_size: int
    tree: DraftTree | None
    captured: tuple[int, ...]  # decode/verify batch sizes with a CUDA graph (empty: all eager)
    prefill_graphs: bool = True

    @classmethod
    def for_args(cls, profile: SimProfile, args: SimArgs, captured: tuple[int, ...]) -> SpeedModel:
        tree = None
        if args.speculative:
            steps, topk, draft = (
                args.speculative_num_steps,
                args.speculative_eagle_topk,
                args.speculative_num_draft_tokens,
            )
            assert steps is not None and topk is not None and draft is not None
            tree = DraftTree(steps, topk, draft)
        graphs = () if args.disable_cuda_graph else tuple(sorted(captured))
        return cls(profile, args.tp_size, tree, graphs, not args.disable_prefill_graph)

    def _allreduce(self) -> float:
        # Ring all-reduce time grows with 2(tp-1)/tp; the profile's figure is for its own GPU count.
        if self.tp_size <= 1:
            return 0.0
        ref = max(2, self.profile.gpu_count)
        return self.profile.allreduce_s * ((self.tp_size - 1) / self.tp_size) / ((ref - 1) / ref)

    def graph_bs(self, batch: int) -> int | None:
        """The captured size a batch is padded to, or None when it runs eagerly."""
        i = bisect.bisect_left(self.captured, batch)
        return self.captured[i] if i < len(self.captured) else None

    def uses_graph(self, batch: int) -> bool:
        return self.graph_bs(batch) is not None

    def step_time(self, batch: int) -> float:
        """Seconds for one decode (or draft + verify) step of ``batch`` running requests."""
        if batch <= 0:
            return 0.0
        p = self.profile
        padded = self.graph_bs(batch)
        eager = padded is None
        b = batch if eager else padded
        assert b is not None

        def fwd(base: float, per_token: float, tokens: int, extra: float = 0.0) -> float:
            t = base + per_token * tokens + extra
            return t * p.eager_factor + p.eager_overhead_s if eager else t

        if p.measured_steps is not None:
            # Measured with CUDA graphs at this batch: the eager path above the captured sizes still costs
            # what the profile says a forward without a graph costs.
            t = measured_step_s(p.measured_steps, self.tree, b)
            return t * p.eager_factor + p.eager_overhead_s if eager else t
        if self.tree is None:
            t = fwd(p.target_step_base_s, p.target_step_per_token_s, b, self._allreduce())
        else:
            s = self.tree
            t = fwd(p.target_step_base_s, p.target_step_per_token_s, b * s.draft_tokens, self._allreduce())
            t += s.steps * fwd(p.draft_step_base_s, p.draft_step_per_token_s, b * s.topk)
            t += fwd(p.draft_step_base_s, p.draft_step_per_token_s, b * s.draft_tokens)
        return t + p.graph_pool_overhead_s * len(self.captured)

    def prefill_time(self, tokens: int) -> float:
        """Seconds for a prefill batch of ``tokens`` prompt tokens (the draft prefills them too)."""
        p = self.profile
        t = p.prefill_base_s + p.prefill_per_token_s * tokens + self._allreduce()
        if self.tree is not None:
            t += p.draft_step_base_s + p.draft_step_per_token_s * tokens
        return t

    def expected_tokens_per_s(self, batch: int, probs: list[float] | None = None) -> float:
        """Steady-state generation rate of ``batch`` requests (for tests and reports, not the server)."""
        per_step = expected_accept_length(probs) if (self.tree is not None and probs is not None) else 1.0
        return batch * per_step / self.step_time(batch)


class SlowNoise:
    """What one launch's throughput does besides its per-step jitter, seeded by ``launch_seed``.

    Real servers show two slow effects that per-step noise cannot: a launch-wide offset (two starts of one
    configuration differ by several percent) and a drift within one server that holds for a while, so a
    sub-second stage sees one value of it and a long stage averages many. The drift is a fresh draw every
    ``drift_period_s`` of the server's life; ``factor(t)`` is the throughput multiplier at ``t`` seconds
    after the launch started serving.
    """

    _CLIP = (0.5, 1.5)

    def __init__(self, launch_sd: float, drift_sd: float, period_s: float, seed: int) -> None:
        self.drift_sd = drift_sd
        self.period_s = period_s
        # A separate stream per purpose: the drift's draws do not depend on how often factor() is called.
        self._rng = random.Random(seed * 2 + 1)
        self.offset = self._draw(random.Random(seed * 2), launch_sd)
        self._drift: list[float] = []

    @classmethod
    def for_profile(cls, profile: SimProfile) -> SlowNoise:
        return cls(profile.launch_noise, profile.drift_noise, profile.drift_period_s, profile.launch_seed)

    def _draw(self, rng: random.Random, sd: float) -> float:
        if sd <= 0:
            return 1.0
        low, high = self._CLIP
        return min(high, max(low, rng.gauss(1.0, sd)))

    def factor(self, t: float) -> float:
        segment = max(0, int(t / self.period_s))
        while len(self._drift) <= segment:
            self._drift.append(self._draw(self._rng, self.drift_sd))
        return self.offset * self._drift[segment]

    def mean_factor(self, start: float, duration: float, resolution_s: float = 0.01) -> float:
        """The throughput multiplier a stage from ``start`` lasting ``duration`` seconds sees on average:
        the tokens it gets are the integral of the rate, so it averages the factor over time."""
        n = max(1, round(duration / resolution_s))
        dt = duration / n
        return sum(self.factor(start + (i + 0.5) * dt) for i in range(n)) / n
