"""What each implementation gives the engines' contract suite (`test_engine_contract.py`), and how a live
server of it is run: one `EngineCase` per engine or node kind, each defined beside its own tests in a
`*_contract.py` module whose `contract_case()` returns it (`discover_cases` finds them all).

A case's logs and HTTP answers are recorded (SGLang's, from real servers: `tests/fixtures/sglang/`) or
made here by launching the implementation's own server (the simulated node, the toy), through the same
`engines.launch.launch_plan` and `engines.process.ServerProcess` a trial uses.
"""

from __future__ import annotations

import asyncio
import importlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from orchestrator.bench.client import RequestOutcome, new_session, run_stage
from orchestrator.bench.control import server_accept_length, server_info, wait_healthy
from orchestrator.bench.greedy import greedy_outputs
from orchestrator.bench.workload import RequestSpec, synthetic_requests
from orchestrator.engines.engine import Engine
from orchestrator.engines.launch import LaunchPlan
from orchestrator.engines.logrecords import LogEvent
from orchestrator.engines.process import LogFollower, ServerProcess, StopReport
from orchestrator.node.backends import NodeBackend, free_port
from orchestrator.records import FailureKind, FailureStage, ServerConfig
from orchestrator.spec.sweep_spec import SweepSpec

TESTS = Path(__file__).resolve().parents[1]
READY_TIMEOUT_S = 60.0
# What every live exchange asks: a few short greedy requests.
REQUESTS = tuple(synthetic_requests(4, 16, 8, 32000, 3))


@dataclass(frozen=True)
class Exchange:
    """One generate request and the server's answers, as its server gave them."""

    input_ids: tuple[int, ...]
    max_new_tokens: int
    stream_lines: tuple[bytes, ...]  # the streamed answer's lines, in order
    greedy_answer: Any  # the answer to the not-streamed request, as JSON
    server_info: dict[str, Any]  # the server's info, once it had served
    stream_request: dict[str, Any] | None = None  # the streamed body it was sent, where recorded apart
    greedy_request: dict[str, Any] | None = None
    greedy_input_ids: tuple[int, ...] = ()  # the not-streamed request's prompt, where it was another


@dataclass(frozen=True)
class FailureCase:
    """A server that failed so at start-up, and its log (recorded, or made by launching into a folder)."""

    name: str
    stage: FailureStage
    kind: FailureKind
    log: Callable[[Path], str]


@dataclass(frozen=True)
class EngineCase:
    name: str
    engine: Engine
    spec: SweepSpec
    config: ServerConfig  # what the ok log (and a live server) ran
    version: str
    module: str  # what the launch runs after `python -m`
    ready_marker: str  # the text of the line that says the server is ready
    failures: tuple[FailureCase, ...]
    # Recorded where no live server runs here; None: taken from the live run.
    ok_log: str | None = None
    exchange: Exchange | None = None
    node: Callable[[Path], NodeBackend] | None = None  # a node that launches a live server here
    no_live: str = ""  # why no live server runs here
    sim_paths: dict[str, str] = field(default_factory=dict)  # launch_plan's simulator arguments


@dataclass(frozen=True)
class LiveRun:
    """One live server of a case, from its launch to its stop."""

    plan: LaunchPlan
    log: str
    ready_line: str  # the line the engine's reader said READY on ('' if it never did)
    healthy: bool
    outcomes: tuple[RequestOutcome, ...]
    greedy: tuple[tuple[int, ...], ...]
    flushed: bool
    accept_length: float | None
    exchange: Exchange | None
    stop: StopReport
    left: tuple[int, ...]  # pids of its tree still alive after the stop


def wait_ready(engine: Engine, server: ServerProcess, log_path: Path) -> str:
    """Follow the log with the engine's reader until it says READY: that line ('' when the server exited
    or ran out of time first)."""
    reader, follower = engine.log_parser(), LogFollower(log_path)
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        for line in follower.new_lines():
            if reader.feed(line, time.monotonic()) is LogEvent.READY:
                return line
        if server.poll() is not None:
            return ""
        time.sleep(0.05)
    return ""


async def _record(api: Any, url: str, session: aiohttp.ClientSession, request: RequestSpec) -> Exchange:
    """One raw exchange, lines as they came: what the reader and the builder are held to."""
    endpoints = api.endpoints
    body = api.stream_body(request.input_ids, request.max_new_tokens)
    headers = {"Content-Type": "application/json"}
    async with session.post(endpoints.url(url, endpoints.generate), data=body, headers=headers) as resp:
        raw = await resp.read()
    greedy = api.greedy_body(request.input_ids, request.max_new_tokens)
    async with session.post(endpoints.url(url, endpoints.generate), json=greedy) as resp:
        answer = await resp.json(content_type=None)
    info = await server_info(url, session, endpoints=endpoints) or {}
    lines = tuple(line.strip() for line in raw.split(b"\n") if line.strip())
    return Exchange(request.input_ids, request.max_new_tokens, lines, answer, info)


async def _serve(engine: Engine, url: str) -> tuple[Any, ...]:
    api = engine.api
    async with new_session(30.0) as session:
        healthy = await wait_healthy(url, session, 30.0, endpoints=api.endpoints, poll_s=0.1)
        if not healthy:
            return False, (), (), False, None, None
        outcomes, _ = await run_stage(url, REQUESTS, 2, api=api, timeout_s=30.0, session=session)
        greedy = await greedy_outputs(url, session, REQUESTS[:2], api=api)
        exchange = await _record(api, url, session, REQUESTS[0])
        accept = await server_accept_length(url, session, api=api)
        flushed = await engine.flush_cache(url, session)
        return healthy, tuple(outcomes), greedy, flushed, accept, exchange


def run_live(case: EngineCase, folder: Path) -> LiveRun:
    """Launch the case's server as a trial does, serve it a few requests through the benchmark client,
    and stop it."""
    assert case.node is not None, case.no_live
    node = case.node(folder)
    plan = node.plan(case.config, free_port(case.spec.server.host), folder)
    log_path = folder / "server.log"
    served: tuple[Any, ...] = (False, (), (), False, None, None)
    with ServerProcess(plan, log_path, stop_grace_s=10.0) as server:
        ready_line = wait_ready(case.engine, server, log_path)
        if ready_line:
            served = asyncio.run(_serve(case.engine, plan.base_url))
    healthy, outcomes, greedy, flushed, accept, exchange = served
    left = tuple(p.pid for p in server.alive_tree())
    return LiveRun(
        plan, log_path.read_text(), ready_line, healthy, outcomes, greedy, flushed, accept, exchange,
        server.stopped(), left,
    )  # fmt: skip


def failed_launch(node: NodeBackend, config: ServerConfig, folder: Path) -> str:
    """The log of a server launched to fail at start-up, once it has exited (or been stopped)."""
    plan = node.plan(config, free_port("127.0.0.1"), folder)
    log_path = folder / "server.log"
    with ServerProcess(plan, log_path, stop_grace_s=5.0) as server:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while server.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
    return log_path.read_text()


def discover_cases() -> list[EngineCase]:
    """The case of every `*_contract.py` under tests/ (the suite's own test module aside), in the order of
    their paths."""
    cases = []
    for path in sorted(p for p in TESTS.rglob("*_contract.py") if not p.name.startswith("test_")):
        name = ".".join(("tests", *path.relative_to(TESTS).with_suffix("").parts))
        cases.append(importlib.import_module(name).contract_case())
    return cases
