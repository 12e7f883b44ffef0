"""What the simulated scheduler keeps: each ``/generate`` request as it is served (`SimRequest`: its output
ids, its place in the KV pool, its verify steps and retractions) and the server's figures (`Stats`)."""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass, field

from orchestrator.sim.prompts import RUNNER_UP_OFFSET, is_near_tie


@dataclass(eq=False)
class SimRequest:
    """One ``/generate`` request and everything its ``meta_info`` reports."""

    rid: str
    input_len: int
    max_new_tokens: int
    rng: random.Random
    vocab: int
    probs: list[float] | None = None  # acceptance for this prompt; None = the scheduler's
    greedy: random.Random | None = None  # the prompt's greedy continuation (None: drawn from rng)
    tie_key: int | None = None  # the prompt's key for near ties (`prompts.margin_at`); None: no ties
    created: float = field(default_factory=time.monotonic)
    output_ids: list[int] = field(default_factory=list)
    kv: int = 0
    verify_ct: int = 0
    accepted_drafts: int = 0
    histogram: list[int] = field(default_factory=list)
    num_retractions: int = 0
    finished: bool = False
    aborted: bool = False
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    done: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def prefill_len(self) -> int:
        """Tokens to prefill: the prompt, plus what it had generated if it was retracted."""
        return self.input_len + len(self.output_ids)

    @property
    def remaining(self) -> int:
        return self.max_new_tokens - len(self.output_ids)

    def emit(self, n: int, wrong_at: int = -1, flip_ties: bool = False) -> None:
        """``n`` more output ids; the one at ``wrong_at`` (an index into these n) is corrupted, and with
        ``flip_ties`` each one at a near tie is the second choice (verify numerics, not a lossy draft)."""
        source = self.greedy or self.rng
        new = [source.randrange(self.vocab) for _ in range(n)]
        if flip_ties and self.tie_key is not None:
            start = len(self.output_ids)
            for k in range(n):
                if is_near_tie(self.tie_key, start + k):
                    new[k] = (new[k] + RUNNER_UP_OFFSET) % self.vocab
        if 0 <= wrong_at < n:
            new[wrong_at] = (new[wrong_at] + 1) % self.vocab
        self.output_ids.extend(new)
        self.kv += n

    def record_verify(self, accepted: int) -> None:
        self.verify_ct += 1
        self.accepted_drafts += accepted
        if len(self.histogram) <= accepted:
            self.histogram.extend([0] * (accepted + 1 - len(self.histogram)))
        self.histogram[accepted] += 1


@dataclass
class Stats:
    """Lifetime (since the last flush) and last-interval figures for server info and metrics."""

    life_tokens: int = 0  # tokens produced by verify steps (accepted drafts + the bonus token)
    life_verify: int = 0
    last_gen_throughput: float = 0.0
    last_accept_len: float = 0.0
    last_accept_rate: float = 0.0
    prompt_tokens: int = 0
    generation_tokens: int = 0
    requests: int = 0

    @property
    def avg_accept_length(self) -> float:
        return self.life_tokens / self.life_verify if self.life_verify else 0.0
