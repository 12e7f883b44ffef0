"""One speculative draft tree: SGLang's (steps, top-k, draft tokens), as the driver and the simulator see it.

The driver's proposal policy enumerates and models trees (`driver.proposal.trees`, `spec_model`); the
simulated server draws each step's acceptance from one (`sim.speed`). Both read the same record, so a
tree means one thing on both sides. A shared leaf: it imports only `records`.
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.records import ServerConfig


def draft_token_bounds(steps: int, topk: int) -> tuple[int, int]:
    """The draft tokens a tree of ``steps`` x ``topk`` can verify: at least the chain (steps + 1), at most
    every node of the tree plus the root (top-k x steps + 1). With top-k 1 both are steps + 1, the value
    SGLang forces. The one statement of the rule: the search space, the spec's known-good check and the
    memory command all read it here."""
    return steps + 1, topk * steps + 1


def draft_tokens_problem(steps: int, topk: int, draft_tokens: int) -> str | None:
    """Why a tree of top-k > 1 cannot have ``draft_tokens`` (None when it can). Top-k 1 is not refused:
    SGLang runs steps + 1 there whatever is asked, with a warning."""
    low, high = draft_token_bounds(steps, topk)
    if topk == 1 or low <= draft_tokens <= high:
        return None
    return (
        f"{draft_tokens} draft tokens is outside the draft tree of top-k {topk} x {steps} steps, which "
        f"holds {low}..{high}; choose a value in {low}..{high}"
    )


@dataclass(frozen=True, order=True)
class DraftTree:
    """One speculative setting: what decides the speed once the memory flags cannot throttle it."""

    steps: int
    topk: int
    draft_tokens: int

    @property
    def max_accepted(self) -> int:
        """Draft tokens one verify can accept: the chain depth, bounded by the tree's size."""
        return max(0, min(self.steps, self.draft_tokens - 1))

    @classmethod
    def of(cls, config: ServerConfig) -> DraftTree | None:
        """The configuration's tree, or None when it does not speculate."""
        s, k, d = (
            config.speculative_num_steps,
            config.speculative_eagle_topk,
            config.speculative_num_draft_tokens,
        )
        if s is None or k is None or d is None:
            return None
        return cls(s, k, d)

    def label(self) -> str:
        return f"s{self.steps}k{self.topk}d{self.draft_tokens}"
