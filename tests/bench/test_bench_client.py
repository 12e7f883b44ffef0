"""The client against a small scripted SGLang-like server (real sockets, real aiohttp on both sides)."""

from __future__ import annotations

import asyncio
import json
import pickle
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from orchestrator.bench.client import RequestOutcome, StageTimeout, StreamAccumulator, new_session, run_stage
from orchestrator.bench.control import server_accept_length, wait_healthy
from orchestrator.bench.metrics import stage_metrics
from orchestrator.bench.workload import RequestSpec
from orchestrator.engines.sglang.control import flush_cache
from orchestrator.engines.sglang.wire import SGLANG_API, SGLANG_ENDPOINTS

T = TypeVar("T")


@dataclass
class Script:
    """How the fake server answers one request: ``steps`` are (delay before the chunk, new tokens)."""

    steps: list[tuple[float, int]]
    cumulative: bool = True  # 0.5.17: every chunk holds all ids so far
    with_meta: bool = True
    verify_ct: int | None = None  # sent in the final chunk's meta_info, as 0.5.17 does
    retractions: int = 0
    status: int = 200
    stall_after: int | None = None  # chunks sent before the stream hangs
    send_done: bool = True
    final_finish: bool = True
    error_message: str | None = None  # a streamed {"error": ...} after the chunks
    abort: bool = False
    spaced_json: bool = False  # json.dumps default separators instead of orjson's compact form


@dataclass
class FakeSglang:
    scripts: dict[int, Script]
    release: asyncio.Event = field(default_factory=asyncio.Event)
    bodies: list[dict[str, Any]] = field(default_factory=list)
    in_flight: int = 0
    max_in_flight: int = 0

    def dumps(self, obj: Any, spaced: bool) -> bytes:
        return json.dumps(obj, separators=None if spaced else (",", ":")).encode()

    async def generate(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.bodies.append(body)
        script = self.scripts[body["input_ids"][0]]
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        finished = False
        try:
            if script.status != 200:
                return web.Response(status=script.status, text="Internal Server Error")
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            ids: list[int] = []
            for n, (delay, k) in enumerate(script.steps, start=1):
                await asyncio.sleep(delay)
                new = list(range(len(ids), len(ids) + k))
                ids += new
                last = n == len(script.steps)
                chunk: dict[str, Any] = {"output_ids": ids if script.cumulative else new}
                if script.with_meta:
                    chunk["meta_info"] = self.meta(script, body, len(ids), last)
                if last and script.error_message is None:
                    # Counted out before the last write: the client may start its next request as
                    # soon as this chunk lands, before this handler gets to run again.
                    self.in_flight -= 1
                    finished = True
                await resp.write(b"data: " + self.dumps(chunk, script.spaced_json) + b"\n\n")
                if script.stall_after == n:
                    await self.release.wait()
            if script.error_message is not None:
                self.in_flight -= 1
                finished = True
                error = {"error": {"message": script.error_message}}
                await resp.write(b"data: " + self.dumps(error, script.spaced_json) + b"\n\n")
            if script.send_done:
                await resp.write(b"data: [DONE]\n\n")
            return resp
        finally:
            if not finished:
                self.in_flight -= 1

    def meta(self, script: Script, body: dict[str, Any], count: int, last: bool) -> dict[str, Any]:
        # The keys of a real 0.5.17 chunk; spec_* only in the final one.
        finish: Any = None
        if last and script.abort:
            finish = {"type": "abort", "message": "out of memory", "status_code": 500}
        elif last and script.final_finish:
            finish = {"type": "length", "length": count}
        meta: dict[str, Any] = {
            "id": "47c95382b3724cc69ccdbc99eddd674d",
            "finish_reason": finish,
            "prompt_tokens": len(body["input_ids"]),
            "weight_version": "default",
            "num_retractions": script.retractions,
            "reasoning_tokens": 0,
            "completion_tokens": count,
            "cached_tokens": 0,
            "cached_tokens_details": None,
            "dp_rank": None,
        }
        if last and script.verify_ct is not None:
            meta.update(
                e2e_latency=0.18,
                spec_accept_length=count / script.verify_ct,
                spec_verify_ct=script.verify_ct,
                spec_accept_histogram=[0, 0, 0, script.verify_ct],
            )
        return meta


@asynccontextmanager
async def serving(app: web.Application) -> AsyncIterator[str]:
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        yield str(server.make_url("")).rstrip("/")
    finally:
        await server.close()


@asynccontextmanager
async def fake_sglang(scripts: dict[int, Script]) -> AsyncIterator[tuple[FakeSglang, str]]:
    fake = FakeSglang(scripts)
    app = web.Application()
    app.router.add_post("/generate", fake.generate)
    try:
        async with serving(app) as url:
            yield fake, url
    finally:
        fake.release.set()  # let stalled handlers end so the server can close


def run(factory: Callable[[], Awaitable[T]]) -> T:
    async def main() -> T:
        return await factory()

    return asyncio.run(main())


def req(script_id: int, prompt_len: int = 8, max_new: int = 16) -> RequestSpec:
    return RequestSpec(input_ids=(script_id,) + (1,) * (prompt_len - 1), max_new_tokens=max_new)


def assert_timing_invariants(o: RequestOutcome) -> None:
    assert o.latency_s - o.ttft_s == pytest.approx(sum(o.itls_s), abs=1e-9)
    assert 0 < o.ttft_s <= o.latency_s


# --- the stream parser, on a scripted clock -------------------------------------------------------


def sglang_stream(start: float) -> StreamAccumulator:
    """The client's timing over SGLang's reader of its `/generate` stream."""
    return StreamAccumulator(start, SGLANG_API.stream_reader())


def line(ids: list[int], meta: dict[str, Any] | None = None) -> bytes:
    chunk: dict[str, Any] = {"output_ids": ids}
    if meta is not None:
        chunk["meta_info"] = meta
    return b"data: " + json.dumps(chunk, separators=(",", ":")).encode()


def test_speculative_chunk_is_split_into_equal_itls_and_latency_minus_ttft_is_their_sum() -> None:
    acc = sglang_stream(start=10.0)
    acc.feed(line([5], {"completion_tokens": 1, "finish_reason": None}), now=10.1)
    acc.feed(line([5, 6, 7, 8, 9], {"completion_tokens": 5, "finish_reason": None}), now=10.3)
    # No new token: neither an ITL nor a new reference time.
    acc.feed(line([5, 6, 7, 8, 9], {"completion_tokens": 5, "finish_reason": None}), now=10.35)
    acc.feed(
        line([5, 6, 7, 8, 9, 10], {"completion_tokens": 6, "finish_reason": {"type": "length"}}), now=10.4
    )
    acc.feed(b"data: [DONE]", now=10.41)
    o = acc.outcome(prompt_tokens=3)
    assert o.success and o.finish_reason == "length"
    assert o.completion_tokens == 6
    assert o.ttft_s == pytest.approx(0.1)
    # 4 tokens in 0.2 s, then 1 token 0.1 s after that chunk (the empty chunk at 10.35 moves nothing).
    assert o.itls_s == pytest.approx((0.05, 0.05, 0.05, 0.05, 0.1))
    assert o.latency_s == pytest.approx(0.4)
    assert_timing_invariants(o)
    assert o.prompt_tokens == 3  # no prompt_tokens in this meta: the request's own length


def test_tokens_counted_from_ids_when_the_server_sends_no_meta_info() -> None:
    cumulative = sglang_stream(start=0.0)
    for n, t in ((1, 0.1), (3, 0.2), (7, 0.3)):
        cumulative.feed(line(list(range(n))), now=t)
    cumulative.feed(b"data: [DONE]", now=0.31)
    assert cumulative.outcome(1).completion_tokens == 7

    incremental = sglang_stream(start=0.0)
    for t in (0.1, 0.2, 0.3):
        incremental.feed(line([42]), now=t)
    incremental.feed(b"data: [DONE]", now=0.31)
    assert incremental.outcome(1).completion_tokens == 3


def test_meta_info_completion_tokens_is_the_authority_over_id_lists() -> None:
    # Incremental output_ids (SGLang's incremental_streaming_output): 2 ids then 3, meta says 2 then 5.
    acc = sglang_stream(start=0.0)
    acc.feed(line([1, 2], {"completion_tokens": 2, "finish_reason": None}), now=0.1)
    acc.feed(line([3, 4, 5], {"completion_tokens": 5, "finish_reason": {"type": "length"}}), now=0.4)
    o = acc.outcome(1)
    assert o.completion_tokens == 5
    assert o.itls_s == pytest.approx((0.1, 0.1, 0.1))


@pytest.mark.parametrize(
    ("lines", "expected"),
    [
        ([line([1], {"completion_tokens": 1, "finish_reason": None})], "before the final chunk"),
        ([b'data: {"error":{"message":"Prefill out of memory"}}', b"data: [DONE]"], "Prefill out of memory"),
        (
            [line([1], {"completion_tokens": 1, "finish_reason": {"type": "abort", "message": "bye"}})],
            "aborted by the server: bye",
        ),
        ([b"data: [DONE]"], "without any token"),
        ([b"data: {not json"], "unparseable"),
    ],
)
def test_broken_streams_are_failures_with_a_reason(lines: list[bytes], expected: str) -> None:
    acc = sglang_stream(start=0.0)
    for n, raw in enumerate(lines):
        acc.feed(raw, now=0.1 * (n + 1))
    o = acc.outcome(1)
    assert not o.success
    assert expected in o.error


def test_a_final_chunk_with_a_finish_reason_but_no_done_line_still_succeeds() -> None:
    acc = sglang_stream(start=0.0)
    acc.feed(line([1], {"completion_tokens": 1, "finish_reason": {"type": "stop"}}), now=0.1)
    assert acc.outcome(1).success


# --- the client over HTTP --------------------------------------------------------------------------


def test_cumulative_speculative_stream_over_http_with_metrics() -> None:
    # Like the 0.5.17 "accept" run: one token, then steps of 4 (accept length 4), verify count in the end.
    steps = [(0.02, 1), (0.04, 4), (0.04, 4), (0.02, 3)]
    scripts = {1: Script(steps=steps, verify_ct=3, retractions=1), 2: Script(steps=[(0.01, 1)] * 5)}

    async def scenario() -> tuple[list[RequestOutcome], float, FakeSglang]:
        async with fake_sglang(scripts) as (fake, url):
            outcomes, duration = await run_stage(url, [req(1), req(2)], 2, api=SGLANG_API, timeout_s=5)
            return outcomes, duration, fake

    outcomes, duration, fake = run(scenario)
    spec, plain = outcomes
    assert spec.success and plain.success, (spec.error, plain.error)
    assert spec.completion_tokens == 12 and plain.completion_tokens == 5
    assert spec.spec_verify_ct == 3 and plain.spec_verify_ct is None
    assert spec.num_retractions == 1 and spec.finish_reason == "length"
    assert spec.prompt_tokens == 8
    for o in outcomes:
        assert_timing_invariants(o)
    # One ITL per token after the first chunk; the 4-token chunks give 4 equal ITLs of about 10 ms.
    assert len(spec.itls_s) == 11
    assert spec.itls_s[0] == spec.itls_s[1] == spec.itls_s[2] == spec.itls_s[3]
    assert spec.itls_s[0] >= 0.035 / 4
    assert spec.ttft_s >= 0.015
    assert spec.latency_s >= 0.11
    assert duration >= spec.latency_s

    # What went over the wire is what bench_serving sends for input ids.
    assert fake.bodies[0]["sampling_params"] == {"max_new_tokens": 16, "temperature": 0, "ignore_eos": True}
    assert fake.bodies[0]["stream"] is True and len(fake.bodies[0]["input_ids"]) == 8

    m = stage_metrics(2, outcomes, duration)
    assert m.output_tok_per_s == pytest.approx(17 / duration)
    assert m.accept_length == pytest.approx(12 / 3)
    assert m.retractions == 1 and m.completed == 2


@pytest.mark.parametrize("variant", ["incremental_with_meta", "cumulative_without_meta", "spaced_json"])
def test_token_counts_over_http_whatever_the_chunk_shape(variant: str) -> None:
    script = Script(
        steps=[(0.0, 1), (0.0, 3), (0.0, 2)],
        cumulative=variant != "incremental_with_meta",
        with_meta=variant != "cumulative_without_meta",
        spaced_json=variant == "spaced_json",
    )

    async def scenario() -> list[RequestOutcome]:
        async with fake_sglang({1: script}) as (_, url):
            outcomes, _ = await run_stage(url, [req(1)], 1, api=SGLANG_API, timeout_s=5)
            return outcomes

    (o,) = run(scenario)
    assert o.success, o.error
    assert o.completion_tokens == 6
    assert len(o.itls_s) == 5


def test_a_chunk_far_larger_than_aiohttps_line_buffer_is_read() -> None:
    # Cumulative ids of a long output make a single SSE line of hundreds of kB (here ~0.8 MB).
    script = Script(steps=[(0.0, 1), (0.0, 120_000)])

    async def scenario() -> list[RequestOutcome]:
        async with fake_sglang({1: script}) as (_, url):
            outcomes, _ = await run_stage(url, [req(1)], 1, api=SGLANG_API, timeout_s=5)
            return outcomes

    (o,) = run(scenario)
    assert o.success, o.error
    assert o.completion_tokens == 120_001


def test_concurrency_limit_is_respected_and_reached() -> None:
    scripts = {1: Script(steps=[(0.01, 1), (0.02, 2), (0.01, 1)])}

    async def scenario() -> tuple[list[RequestOutcome], FakeSglang]:
        async with fake_sglang(scripts) as (fake, url):
            outcomes, _ = await run_stage(url, [req(1)] * 12, 3, api=SGLANG_API, timeout_s=5)
            return outcomes, fake

    outcomes, fake = run(scenario)
    assert all(o.success for o in outcomes)
    assert fake.max_in_flight == 3


def test_ttft_starts_when_the_request_is_sent_not_while_it_waits_for_a_slot() -> None:
    # As in bench_serving: time spent queued behind the semaphore is not the server's latency.
    scripts = {1: Script(steps=[(0.01, 1), (0.06, 1)])}

    async def scenario() -> list[RequestOutcome]:
        async with fake_sglang(scripts) as (_, url):
            outcomes, duration = await run_stage(url, [req(1)] * 3, 1, api=SGLANG_API, timeout_s=5)
            assert duration >= 3 * 0.07
            return outcomes

    outcomes = run(scenario)
    assert all(o.success for o in outcomes)
    # Counted from before the wait, the third request's TTFT would be over 0.15 s.
    assert max(o.ttft_s for o in outcomes) < 0.1, [o.ttft_s for o in outcomes]


def test_a_stage_cycles_its_prompts_until_its_minimum_duration_and_tokens() -> None:
    scripts = {1: Script(steps=[(0.01, 1), (0.01, 2)]), 2: Script(steps=[(0.02, 3)])}

    async def scenario(min_s: float, min_tokens: int) -> tuple[list[RequestOutcome], float]:
        async with fake_sglang(scripts) as (_, url):
            return await run_stage(
                url,
                [req(1), req(2)],
                2,
                api=SGLANG_API,
                timeout_s=5,
                min_duration_s=min_s,
                min_tokens=min_tokens,
            )

    outcomes, duration = run(lambda: scenario(0.3, 0))
    assert duration >= 0.3 and len(outcomes) > 4
    assert all(o.success for o in outcomes)
    sent = [o.sent_s for o in outcomes]
    assert sent == sorted(sent) and sent[0] == pytest.approx(0.0, abs=0.01)
    # After the first pass, the prompts come round again in order.
    assert [o.completion_tokens for o in outcomes[:4]] == [3, 3, 3, 3]
    outcomes, _ = run(lambda: scenario(0.0, 40))
    assert sum(o.completion_tokens for o in outcomes) >= 40
    # Without minimums: one pass, as before.
    outcomes, _ = run(lambda: scenario(0.0, 0))
    assert len(outcomes) == 2


def test_cycling_stops_at_the_first_failed_request() -> None:
    scripts = {1: Script(steps=[(0.01, 1)]), 2: Script(steps=[], status=500)}

    async def scenario() -> list[RequestOutcome]:
        async with fake_sglang(scripts) as (_, url):
            outcomes, _ = await run_stage(
                url, [req(1), req(2)], 1, api=SGLANG_API, timeout_s=5, min_duration_s=30.0
            )
            return outcomes

    outcomes = run(scenario)
    assert [o.success for o in outcomes] == [True, False]


def test_failing_requests_are_data_and_do_not_abort_the_stage() -> None:
    scripts = {
        1: Script(steps=[(0.01, 1), (0.01, 1)]),
        2: Script(steps=[], status=500),
        3: Script(steps=[(0.01, 1)], final_finish=False, error_message="Decode out of memory"),
        4: Script(steps=[(0.01, 1), (0.01, 1)], abort=True),
    }

    async def scenario() -> tuple[list[RequestOutcome], float]:
        async with fake_sglang(scripts) as (_, url):
            return await run_stage(
                url, [req(1), req(2), req(3), req(4), req(1)], 2, api=SGLANG_API, timeout_s=5
            )

    outcomes, duration = run(scenario)
    assert [o.success for o in outcomes] == [True, False, False, False, True]
    assert outcomes[1].error.startswith("HTTP 500")
    assert outcomes[2].error == "Decode out of memory"
    assert "aborted" in outcomes[3].error
    m = stage_metrics(2, outcomes, duration)
    assert (m.completed, m.failed) == (2, 3)
    # Failures break the closed loop of a steady window: the stage is measured whole.
    assert not m.steady
    assert m.output_tok_per_s == pytest.approx(4 / duration)
    assert len(m.errors) == 3


def test_a_dead_server_gives_failed_outcomes_not_an_exception() -> None:
    async def scenario() -> list[RequestOutcome]:
        async with serving(web.Application()) as url:
            pass  # closed: nothing listens on the port any more
        outcomes, _ = await run_stage(url, [req(1), req(1)], 2, api=SGLANG_API, timeout_s=5)
        return outcomes

    outcomes = run(scenario)
    assert [o.success for o in outcomes] == [False, False]
    assert all(o.error for o in outcomes)


def test_a_stalled_stream_ends_the_stage_with_a_timeout_keeping_finished_outcomes() -> None:
    scripts = {1: Script(steps=[(0.0, 1), (0.0, 1)]), 2: Script(steps=[(0.0, 1), (0.0, 1)], stall_after=1)}
    timeout_s = 0.5

    async def scenario() -> tuple[StageTimeout, float]:
        async with fake_sglang(scripts) as (_, url):
            began = time.perf_counter()
            with pytest.raises(StageTimeout) as caught:
                await run_stage(url, [req(1), req(2), req(1)], 3, api=SGLANG_API, timeout_s=timeout_s)
            return caught.value, time.perf_counter() - began

    err, elapsed = run(scenario)
    assert isinstance(err, asyncio.TimeoutError)
    assert timeout_s <= elapsed < timeout_s + 1.0
    assert err.pending == 1
    assert [o.success for o in err.outcomes] == [True, True]
    copy = pickle.loads(pickle.dumps(err))
    assert (copy.timeout_s, copy.pending, copy.outcomes) == (err.timeout_s, err.pending, err.outcomes)


def test_stage_rejects_a_concurrency_below_one() -> None:
    with pytest.raises(ValueError, match="concurrency"):
        run(lambda: run_stage("http://127.0.0.1:9", [req(1)], 0, api=SGLANG_API, timeout_s=1))


# --- control endpoints ----------------------------------------------------------------------------


SERVER_INFO = {"version": "0.5.17", "internal_states": [{"avg_spec_accept_length": 1.0005571030640668}]}


def control_app(statuses: dict[str, list[int]], calls: dict[str, int]) -> web.Application:
    """Each path answers the next status of its list (the last one repeats), counting calls."""

    def handler(path: str) -> Callable[[web.Request], Awaitable[web.Response]]:
        async def answer(_: web.Request) -> web.Response:
            n = calls.get(path, 0)
            calls[path] = n + 1
            status = statuses[path][min(n, len(statuses[path]) - 1)]
            if status == 200 and path.endswith("server_info"):
                return web.json_response(SERVER_INFO)
            return web.Response(status=status, text="x")

        return answer

    app = web.Application()
    for path in statuses:
        app.router.add_route("*", path, handler(path))
    return app


def test_flush_cache_retries_while_requests_are_pending() -> None:
    async def scenario() -> tuple[bool, bool, dict[str, int]]:
        calls: dict[str, int] = {}
        paths = {"/flush_cache": [400, 400, 200], "/busy/flush_cache": [400], "/broken/flush_cache": [500]}
        app = control_app(paths, calls)
        async with serving(app) as url, new_session() as session:
            ok = await flush_cache(url, session, endpoints=SGLANG_ENDPOINTS, delay_s=0.01)
            busy = await flush_cache(
                url + "/busy", session, endpoints=SGLANG_ENDPOINTS, attempts=3, delay_s=0.01
            )
            broken = await flush_cache(
                url + "/broken", session, endpoints=SGLANG_ENDPOINTS, attempts=3, delay_s=0.01
            )
            return ok, busy or broken, calls

    ok, refused, calls = run(scenario)
    assert ok and calls["/flush_cache"] == 3
    assert not refused
    assert calls["/busy/flush_cache"] == 3
    assert calls["/broken/flush_cache"] == 1  # only 400 means "requests pending, try again"


def test_server_accept_length_falls_back_to_get_server_info() -> None:
    async def scenario() -> tuple[float | None, float | None]:
        old = control_app({"/server_info": [404], "/get_server_info": [200]}, {})
        async with serving(old) as url, new_session() as session:
            fallback = await server_accept_length(url, session, api=SGLANG_API)
        broken = control_app({"/server_info": [500], "/get_server_info": [500]}, {})
        async with serving(broken) as url, new_session() as session:
            missing = await server_accept_length(url, session, api=SGLANG_API)
        return fallback, missing

    fallback, missing = run(scenario)
    assert fallback == pytest.approx(1.0005571030640668)
    assert missing is None


def test_wait_healthy_waits_through_503_and_gives_up_at_its_deadline() -> None:
    async def scenario() -> tuple[bool, bool, bool, float]:
        calls: dict[str, int] = {}
        app = control_app({"/health": [503, 503, 200], "/never/health": [503]}, calls)
        async with serving(app) as url, aiohttp.ClientSession() as session:
            up = await wait_healthy(url, session, 5, endpoints=SGLANG_ENDPOINTS, poll_s=0.01)
            began = time.perf_counter()
            down = await wait_healthy(url + "/never", session, 0.3, endpoints=SGLANG_ENDPOINTS, poll_s=0.05)
            elapsed = time.perf_counter() - began
        async with aiohttp.ClientSession() as session:
            nobody = await wait_healthy(
                url, session, 0.2, endpoints=SGLANG_ENDPOINTS, poll_s=0.05
            )  # server gone: refused
        assert calls["/health"] == 3
        return up, down, nobody, elapsed

    up, down, nobody, elapsed = run(scenario)
    assert up and not down and not nobody
    assert 0.3 <= elapsed < 1.0


def test_a_cycled_stage_is_broken_down_by_each_outcomes_own_request() -> None:
    # A stage that cycles its prompts has more outcomes than requests: each outcome says which request
    # it served, so the per-dataset figures count every one (this raised in the trial, on a real run).
    from orchestrator.bench.traffic import dataset_breakdown
    from orchestrator.bench.workload import RequestSpec

    scripts = {1: Script(steps=[(0.01, 1), (0.01, 2)]), 2: Script(steps=[(0.02, 3)])}
    requests = [RequestSpec(req(1).input_ids, 8, "chat"), RequestSpec(req(2).input_ids, 8, "code")]

    async def scenario() -> tuple[list[RequestOutcome], float]:
        async with fake_sglang(scripts) as (_, url):
            return await run_stage(url, requests, 2, api=SGLANG_API, timeout_s=5, min_duration_s=0.3)

    outcomes, duration = run(scenario)
    assert len(outcomes) > len(requests)
    assert [o.request_index for o in outcomes[:4]] == [0, 1, 0, 1]
    per = {m.name: m for m in dataset_breakdown(2, requests, outcomes, duration)}
    assert per["chat"].num_requests + per["code"].num_requests == len(outcomes)
    assert per["chat"].num_requests == sum(1 for o in outcomes if o.request_index == 0)
