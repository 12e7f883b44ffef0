"""Greedy outputs for the lossless check: a fixed few prompts of the workload, generated one at a time
at temperature 0, and a token-by-token comparison (see orchestrator.driver.loop.lossless for the check
itself)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import aiohttp

from orchestrator.bench.traffic import build_requests
from orchestrator.bench.workload import RequestSpec
from orchestrator.engines.api import ServerApi
from orchestrator.records import Margin
from orchestrator.spec.sweep_spec import SweepSpec

NUM_PROMPTS = 4
MAX_NEW_TOKENS = 32  # at batch 1 this costs about a second per trial on the demo node
_TIMEOUT = aiohttp.ClientTimeout(total=120)
# bf16 keeps 8 significant bits, so a logit near 32 is rounded in steps of 0.125: two kernels that sum
# in another order (the verify pass over a draft tree against the plain decode) can swap two tokens
# whose log-probabilities are closer than that. A lossy draft diverges where the target was sure.
NEAR_TIE_NATS = 0.125


def check_requests(spec: SweepSpec) -> list[RequestSpec]:
    """The fixed prompts every trial generates: the workload's first few, with short outputs."""
    return [
        replace(r, max_new_tokens=min(r.max_new_tokens, MAX_NEW_TOKENS))
        for r in build_requests(spec)[:NUM_PROMPTS]
    ]


@dataclass(frozen=True)
class GreedyAnswers:
    """Each prompt's greedy output ids, and its per-position top-two margins (() where the engine gave
    none)."""

    outputs: tuple[tuple[int, ...], ...]
    margins: tuple[tuple[Margin | None, ...], ...]


async def greedy_outputs(
    base_url: str, session: aiohttp.ClientSession, requests: Sequence[RequestSpec], *, api: ServerApi
) -> tuple[tuple[int, ...], ...]:
    """Each prompt's greedy output ids (one request at a time, so batching cannot change numerics)."""
    return (await greedy_answers(base_url, session, requests, api=api)).outputs


async def greedy_answers(
    base_url: str,
    session: aiohttp.ClientSession,
    requests: Sequence[RequestSpec],
    *,
    api: ServerApi,
    scored: bool = False,
) -> GreedyAnswers:
    """`greedy_outputs` with, when ``scored`` (the baseline's), the margins the server scored beside them."""
    url = api.endpoints.url(base_url, api.endpoints.generate)
    out = []
    margins: list[tuple[Margin | None, ...]] = []
    for r in requests:
        body = api.greedy_body(r.input_ids, r.max_new_tokens, scored=scored)
        async with session.post(url, json=body, timeout=_TIMEOUT) as resp:
            data: Any = await resp.json(content_type=None)
        ids = api.greedy_ids(data) if resp.status == 200 else None
        if ids is None:
            raise RuntimeError(
                f"lossless check: {api.endpoints.generate} answered {resp.status}: {str(data)[:200]}"
            )
        out.append(ids)
        margins.append(api.greedy_margins(data) or ())
    return GreedyAnswers(tuple(out), tuple(margins))


@dataclass(frozen=True)
class Mismatch:
    """The first token where a speculative trial's output left the baseline's."""

    prompt: int  # index into check_requests
    dataset: str
    prompt_len: int
    prompt_tail: tuple[int, ...]  # its last ids (the start is often a shared system prompt)
    position: int
    expected: int | None  # the baseline's token there (None: the baseline's output ended)
    got: int | None
    margin: Margin | None = None  # the baseline's top-two margin there (None: not scored)

    @property
    def near_tie(self) -> bool:
        """The speculative token was the baseline's own second choice by at most `NEAR_TIE_NATS`:
        a rounding difference between the verify and the plain decode, not a lossy draft."""
        if self.margin is None or self.got is None or self.margin.nats > NEAR_TIE_NATS:
            return False
        return self.margin.runner_up == self.got or self.legacy_exact_tie

    @property
    def legacy_exact_tie(self) -> bool:
        """A margin recorded before the runner-up was read as the token *not* emitted: at an exact tie
        SGLang may list the other token first, and that reader named the emitted token itself at 0 nats.
        The tie's other token was not kept, so the trial's token there is taken as the tie-break."""
        assert self.margin is not None
        return self.margin.nats == 0 and self.margin.runner_up == self.expected

    def describe(self) -> str:
        tail = ", ".join(str(i) for i in self.prompt_tail)
        margin = f" (baseline margin {self.margin.nats:.3g} nats)" if self.margin is not None else ""
        if self.margin is not None and self.legacy_exact_tie:
            margin = " (an exact tie in the baseline, recorded without its other token)"
        return (
            f"prompt {self.prompt} ({self.dataset}, {self.prompt_len} ids ending [..., {tail}]): "
            "first difference at output "
            f"position {self.position}: baseline token {self.expected}, speculative token {self.got}"
            f"{margin}"
        )


def compare(
    requests: Sequence[RequestSpec],
    baseline: Sequence[Sequence[int]],
    trial: Sequence[Sequence[int]],
    margins: Sequence[Sequence[Margin | None]] = (),
) -> list[Mismatch]:
    """Every prompt whose outputs differ, with the first differing position and the baseline's margin
    there (``margins``: the baseline's, per prompt and position; missing ones leave the margin None)."""
    found = []
    for index, (req, want, got) in enumerate(zip(requests, baseline, trial, strict=False)):
        scored = margins[index] if index < len(margins) else ()
        for pos in range(max(len(want), len(got))):
            a = want[pos] if pos < len(want) else None
            b = got[pos] if pos < len(got) else None
            if a != b:
                margin = scored[pos] if pos < len(scored) else None
                tail = req.input_ids[-8:]
                found.append(Mismatch(index, req.dataset, len(req.input_ids), tail, pos, a, b, margin))
                break
    return found
