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
from orchestrator.spec.sweep_spec import SweepSpec

NUM_PROMPTS = 4
MAX_NEW_TOKENS = 32  # at batch 1 this costs about a second per trial on the demo node
_TIMEOUT = aiohttp.ClientTimeout(total=120)


def check_requests(spec: SweepSpec) -> list[RequestSpec]:
    """The fixed prompts every trial generates: the workload's first few, with short outputs."""
    return [
        replace(r, max_new_tokens=min(r.max_new_tokens, MAX_NEW_TOKENS))
        for r in build_requests(spec)[:NUM_PROMPTS]
    ]


async def greedy_outputs(
    base_url: str, session: aiohttp.ClientSession, requests: Sequence[RequestSpec], *, api: ServerApi
) -> tuple[tuple[int, ...], ...]:
    """Each prompt's greedy output ids (one request at a time, so batching cannot change numerics)."""
    url = api.endpoints.url(base_url, api.endpoints.generate)
    out = []
    for r in requests:
        body = api.greedy_body(r.input_ids, r.max_new_tokens)
        async with session.post(url, json=body, timeout=_TIMEOUT) as resp:
            data: Any = await resp.json(content_type=None)
        ids = api.greedy_ids(data) if resp.status == 200 else None
        if ids is None:
            raise RuntimeError(
                f"lossless check: {api.endpoints.generate} answered {resp.status}: {str(data)[:200]}"
            )
        out.append(ids)
    return tuple(out)


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

    def describe(self) -> str:
        tail = ", ".join(str(i) for i in self.prompt_tail)
        return (
            f"prompt {self.prompt} ({self.dataset}, {self.prompt_len} ids ending [..., {tail}]): "
            "first difference at output "
            f"position {self.position}: baseline token {self.expected}, speculative token {self.got}"
        )


def compare(
    requests: Sequence[RequestSpec],
    baseline: Sequence[Sequence[int]],
    trial: Sequence[Sequence[int]],
) -> list[Mismatch]:
    """Every prompt whose outputs differ, with the first differing position."""
    found = []
    for index, (req, want, got) in enumerate(zip(requests, baseline, trial, strict=False)):
        for pos in range(max(len(want), len(got))):
            a = want[pos] if pos < len(want) else None
            b = got[pos] if pos < len(got) else None
            if a != b:
                found.append(Mismatch(index, req.dataset, len(req.input_ids), req.input_ids[-8:], pos, a, b))
                break
    return found
