"""Streaming client for an engine's generate endpoint, timed the way SGLang's bench_serving times it.

Per request: TTFT is the time to the first chunk that carries tokens; every later chunk that carries
``k`` new tokens adds ``k`` inter-token latencies of ``gap / k`` (a speculative step delivers several
tokens at once); chunks with no new token are skipped. Latency is the time of the last token chunk, so
``latency - ttft == sum(itls)`` holds exactly (bench_serving stops its clock at ``[DONE]``, which
follows the last chunk at once).

What a request looks like and how an answer's lines count tokens are the engine's (`engines.api.ServerApi`:
its `stream_body` and `stream_reader`; SGLang's, and why its reader parses as little as it does, in
`engines.sglang.wire`); the timing is this module's, one code for every engine.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import aiohttp

from orchestrator.bench.workload import RequestSpec
from orchestrator.engines.api import ServerApi, StreamReader, describe_error
from orchestrator.errors import ErrorKind, SpecsweepError

log = logging.getLogger(__name__)

_JSON_HEADERS = {"Content-Type": "application/json"}
_MAX_ERROR_CHARS = 300


@dataclass(frozen=True)
class RequestOutcome:
    """What one request measured. A failed request is data: ``success`` False and ``error`` set."""

    success: bool
    error: str
    prompt_tokens: int
    completion_tokens: int
    ttft_s: float
    latency_s: float
    itls_s: tuple[float, ...]
    spec_verify_ct: int | None  # verify steps, final chunk only, when speculation is on
    num_retractions: int  # times the server retracted this request for lack of KV cache
    finish_reason: str  # "length", "stop", "abort", or "" when the server never said
    sent_s: float | None = None  # when it was sent, in seconds after the stage began (None: unknown)
    request_index: int | None = None  # which of the stage's requests it served (a stage may cycle them)


class StageTimeout(SpecsweepError, TimeoutError):
    """A stage ran past its deadline: its unfinished requests (in flight or queued) were cancelled.

    A ``TimeoutError`` (so also ``asyncio.TimeoutError``), which is how `node.trial_bench` catches it, that
    keeps what had finished, so the caller can tell a server that hung mid-benchmark from one that was
    merely slow. Its fields survive pickling as every `SpecsweepError`'s do (Ray moves exceptions between
    processes).
    """

    kind = ErrorKind.SERVER_TIMEOUT

    def __init__(self, timeout_s: float, outcomes: Sequence[RequestOutcome] = (), pending: int = 0) -> None:
        super().__init__(f"benchmark stage had {pending} unfinished request(s) after {timeout_s:g} s")
        self.timeout_s = timeout_s
        self.outcomes = tuple(outcomes)
        self.pending = pending


class StreamAccumulator:
    """Folds one request's streamed lines into timings and counts; fed with the arrival time of each line.
    The engine's ``reader`` says how many tokens each line brings the answer to, and how it ended."""

    __slots__ = ("count", "error", "itls", "last", "reader", "start", "ttft")

    def __init__(self, start: float, reader: StreamReader) -> None:
        self.start = start
        self.reader = reader
        self.last = start
        self.ttft = -1.0
        self.count = 0
        self.itls: list[float] = []
        self.error = ""  # the transport's: an HTTP status, a dropped connection (the stream's: the reader's)

    def feed(self, line: bytes, now: float) -> None:
        """One line of the answer, without its newline."""
        total = self.reader.tokens(line, self.count)
        if total is None:
            return
        new = total - self.count
        if new <= 0:
            return
        if self.ttft < 0:
            self.ttft = now - self.start
        else:
            self.itls.extend([(now - self.last) / new] * new)
        self.last = now
        self.count = total

    def outcome(self, prompt_tokens: int) -> RequestOutcome:
        """The request's result once its stream has ended (or broken off, with ``error`` set)."""
        end = self.reader.end()
        # A stream's own error comes before any the transport meets after it (and none follows an HTTP error).
        error = end.error or self.error
        if not error:
            if end.finish_reason == "abort":
                error = f"request aborted by the server: {end.abort_message}".rstrip(": ")
            elif self.count == 0:
                error = "stream ended without any token"
            elif not end.done and not end.finished:
                error = "stream ended before the final chunk"
        return RequestOutcome(
            success=not error,
            error=error[:_MAX_ERROR_CHARS],
            prompt_tokens=end.prompt_tokens if end.prompt_tokens is not None else prompt_tokens,
            completion_tokens=self.count,
            ttft_s=max(self.ttft, 0.0),
            latency_s=self.last - self.start,
            itls_s=tuple(self.itls),
            spec_verify_ct=end.spec_verify_ct,
            num_retractions=end.num_retractions,
            finish_reason=end.finish_reason,
        )


def new_session(sock_read_s: float | None = None) -> aiohttp.ClientSession:
    """The session to benchmark with: no connector cap (aiohttp's default of 100 would silently cap
    concurrency; the stage's semaphore is the only limit) and no total timeout (a stage has its own)."""
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0),
        timeout=aiohttp.ClientTimeout(total=None, sock_read=sock_read_s),
    )


async def run_stage(
    base_url: str,
    requests: Sequence[RequestSpec],
    concurrency: int,
    *,
    api: ServerApi,
    timeout_s: float,
    session: aiohttp.ClientSession | None = None,
    min_duration_s: float = 0.0,
    min_tokens: int = 0,
) -> tuple[list[RequestOutcome], float]:
    """Send every request, at most ``concurrency`` in flight; return the outcomes (in the order they were
    sent) and the stage's duration in seconds, from the first request sent to the last one finished.

    After one pass over ``requests`` the stage cycles through them again until it has run for
    ``min_duration_s`` and finished requests hold ``min_tokens`` output tokens: a short stage measures
    its ramp-up, not the server. Cycling stops at the first failed request (a failing server is not
    measured for longer). Each outcome says when it was sent (``sent_s``).

    Raises StageTimeout when the stage is still running after ``timeout_s``.
    """
    if concurrency < 1:
        raise ValueError(f"concurrency must be at least 1, got {concurrency}")
    if timeout_s <= 0:
        raise ValueError(f"timeout_s must be positive, got {timeout_s}")
    if not requests:
        return [], 0.0
    url = api.endpoints.url(base_url, api.endpoints.generate)
    # Serialized before the clock starts: the measurement is of the server, not of json.dumps.
    bodies = [api.stream_body(r.input_ids, r.max_new_tokens) for r in requests]
    prompt_lens = [len(r.input_ids) for r in requests]
    per_request = aiohttp.ClientTimeout(total=None, sock_read=timeout_s)
    own_session = session is None
    http = session if session is not None else new_session(timeout_s)
    connector = http.connector
    if isinstance(connector, aiohttp.TCPConnector) and 0 < connector.limit < concurrency:
        log.warning(
            "session's connector allows %d connections, fewer than concurrency %d: use new_session()",
            connector.limit,
            concurrency,
        )
    perf = time.perf_counter
    start = perf()
    done: dict[int, RequestOutcome] = {}
    state = {"next": 0, "tokens": 0, "failed": 0}

    def more() -> bool:
        if state["next"] < len(bodies):
            return True
        if state["failed"]:
            return False
        return perf() - start < min_duration_s or state["tokens"] < min_tokens

    async def worker() -> None:
        while more():
            index = state["next"]
            state["next"] += 1
            which = index % len(bodies)
            sent = perf()
            outcome = await _stream_one(http, url, bodies[which], prompt_lens[which], per_request, api)
            done[index] = replace(outcome, sent_s=sent - start, request_index=which)
            if outcome.success:
                state["tokens"] += outcome.completion_tokens
            else:
                state["failed"] += 1

    tasks: list[asyncio.Task[None]] = []
    try:
        start = perf()
        tasks = [asyncio.create_task(worker()) for _ in range(concurrency)]
        _, pending = await asyncio.wait(tasks, timeout=timeout_s)
        duration = perf() - start
        finished = [done[i] for i in sorted(done)]
        if pending:  # cancelled on the way out, in the finally clause
            unfinished = max(state["next"], len(bodies)) - len(done)
            log.warning("stage timed out after %.1f s with %d unfinished request(s)", duration, unfinished)
            raise StageTimeout(timeout_s, finished, unfinished)
        return finished, duration
    finally:
        await _cancel([t for t in tasks if not t.done()])  # after a timeout, or when our caller cancels us
        if own_session:
            await http.close()


async def _stream_one(
    http: aiohttp.ClientSession,
    url: str,
    body: bytes,
    prompt_len: int,
    timeout: aiohttp.ClientTimeout,
    api: ServerApi,
) -> RequestOutcome:
    perf = time.perf_counter
    acc = StreamAccumulator(perf(), api.stream_reader())
    feed = acc.feed
    try:
        async with http.post(url, data=body, headers=_JSON_HEADERS, timeout=timeout) as resp:
            if resp.status != 200:
                text = (await resp.text(errors="replace")).strip()
                acc.error = f"HTTP {resp.status}: {text}" if text else f"HTTP {resp.status}"
                return acc.outcome(prompt_len)
            # Lines are split here rather than by `async for line in resp.content`: aiohttp's readline
            # refuses lines over twice its read buffer ("Chunk too big"), and cumulative output_ids
            # of a long output make lines of hundreds of kB.
            buf = bytearray()
            async for data in resp.content.iter_any():
                scan_from = len(buf)
                buf += data
                newline = buf.find(b"\n", scan_from)
                if newline < 0:
                    continue
                begin = 0
                while newline >= 0:
                    if newline > begin:
                        feed(bytes(buf[begin:newline]), perf())
                    begin = newline + 1
                    newline = buf.find(b"\n", begin)
                del buf[:begin]
            if buf.strip():
                feed(bytes(buf).strip(), perf())
    except Exception as exc:  # every failure of one request is data, never the end of the stage
        acc.error = acc.error or describe_error(exc, timeout)
    return acc.outcome(prompt_len)


async def _cancel(tasks: Sequence[asyncio.Task[Any]]) -> None:
    for task in tasks:
        task.cancel()
    if tasks:
        await asyncio.gather(*tasks, return_exceptions=True)
