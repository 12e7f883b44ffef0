"""The engines' contract: one suite that every engine and node kind passes, parametrized over them (in the
manner of Optuna's storage tests): SGLang's engine on real SGLang logs and answers, the simulated node
(SGLang's engine over the simulated server, live), and the toy engine (its own server, live).

What a trial relies on, and nothing of one engine: the launch command, readiness on the line that says so,
the log's report (memory, what the server settled on), failures with their stage and kind, the HTTP API
through the benchmark client (request bodies, streamed answers, greedy outputs, accept length, the
cache flush), and a clean stop. Each implementation's case stands beside its own tests, in a
module named `*_contract.py` whose `contract_case()` gives it (`contract.discover_cases`): an engine joins
the suite from its own test folder.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from orchestrator.bench.client import StreamAccumulator
from orchestrator.engines.engine import LaunchSettings, LogReader, TrialLaunch, read_all
from orchestrator.engines.launch import launch_plan
from orchestrator.engines.logrecords import LogEvent
from orchestrator.mlflow_schema import param_value
from orchestrator.records import FailureKind, FailureStage
from tests.engines.contract import EngineCase, Exchange, FailureCase, LiveRun, discover_cases, run_live

CASES = discover_cases()
FAILURES = [(c, f) for c in CASES for f in c.failures]
PORT = 4321

Live = Callable[[EngineCase], LiveRun]


@pytest.fixture(params=CASES, ids=lambda c: c.name)
def case(request: pytest.FixtureRequest) -> EngineCase:
    return request.param


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Live:
    """Each live case's one run, shared by the tests that read it (a launch costs seconds)."""
    runs: dict[str, LiveRun] = {}

    def run(case: EngineCase) -> LiveRun:
        if case.node is None:
            pytest.skip(case.no_live)
        if case.name not in runs:
            runs[case.name] = run_live(case, tmp_path_factory.mktemp(f"live-{case.name}"))
        return runs[case.name]

    return run


def ok_log(case: EngineCase, live: Live) -> str:
    return case.ok_log if case.ok_log is not None else live(case).log


def exchange_of(case: EngineCase, live: Live) -> Exchange:
    exchange = case.exchange if case.exchange is not None else live(case).exchange
    assert exchange is not None, "the live server never answered"
    return exchange


def fed(case: EngineCase, text: str) -> tuple[list[tuple[int, LogEvent]], LogReader]:
    """Every event the engine's reader gives, line by line as a trial feeds it (``now`` = line index), and
    the reader."""
    reader = case.engine.log_parser()
    events: list[tuple[int, LogEvent]] = [
        (i, reader.feed(line, float(i))) for i, line in enumerate(text.splitlines())
    ]
    return [(i, e) for i, e in events if e is not LogEvent.NONE], reader


def test_the_suite_runs_for_sglang_and_the_simulated_node_each_once() -> None:
    names = [c.name for c in CASES]
    assert {"sglang", "simulated"} <= set(names) and len(names) == len(set(names)) >= 3


# --- the launch command ----------------------------------------------------------------------------


def test_the_launch_command_runs_the_module_with_the_engines_flags(case: EngineCase) -> None:
    spec, config, engine = case.spec, case.config, case.engine
    plan = launch_plan(
        spec, config, version=case.version, port=PORT, tp_size=spec.node.gpus, adaptive_config_path="a.json",
        **case.sim_paths,
    )  # fmt: skip
    flags = engine.flags(
        TrialLaunch(
            LaunchSettings.from_spec(spec),
            config,
            version=case.version,
            port=PORT,
            tp_size=spec.node.gpus,
            adaptive_config_path="a.json",
        )
    )
    assert plan.argv[:3] == (spec.server.python or sys.executable, "-m", case.module)
    assert plan.argv[3 : 3 + len(flags)] == tuple(flags)
    assert plan.base_url.endswith(f":{PORT}")
    # The port is set by a flag the sweep owns: no fixed flag of a spec can move the server elsewhere.
    assert flags[flags.index(str(PORT)) - 1] in engine.owned_flags
    fixed = list(spec.server.flags)
    starts = [i for i in range(len(flags)) if flags[i : i + len(fixed)] == fixed]
    assert starts, "the spec's fixed flags are passed as given"
    # A param's flag, as the engine names it (the report, a command rebuilt from MLflow), is the one it sets.
    for param in ("mem_fraction_static", "max_running_requests"):
        flag = engine.flag_name(param, case.version)
        assert flags[flags.index(flag) + 1] == param_value(getattr(config, param)), param


def test_the_version_reads_and_runs_the_configuration(case: EngineCase) -> None:
    version = case.engine.parse_version(case.version)
    assert version and all(isinstance(v, int) for v in version)
    assert case.engine.unsupported(case.config, case.version) == ""


# --- the log ---------------------------------------------------------------------------------------


def test_ready_fires_once_on_the_line_that_says_so(case: EngineCase, live: Live) -> None:
    text = ok_log(case, live)
    events, _ = fed(case, text)
    ready_at = next(i for i, line in enumerate(text.splitlines()) if case.ready_marker in line)
    assert events == [(ready_at, LogEvent.READY)]


def test_a_ready_servers_log_reports_its_memory_and_what_it_settled_on(case: EngineCase, live: Live) -> None:
    text = ok_log(case, live)
    report = fed(case, text)[1].report()
    assert report.ready and report.ready_at is not None and report.failure is None
    assert report.last_stage is FailureStage.UNDER_LOAD  # where a trial's phase reads it from
    assert report.memory.weights_gb is not None and (report.memory.kv_cache_tokens or 0) > 0
    args = report.args
    assert args is not None
    assert (args.mem_fraction_static, args.max_running_requests) == (
        case.config.mem_fraction_static,
        case.config.max_running_requests,
    )
    assert args.launch_values().mem_fraction_static == case.config.mem_fraction_static
    # Read whole, as the memory prior's log shift reads one: the same report.
    assert read_all(case.engine.log_parser(), text).report().memory == report.memory


@pytest.mark.parametrize(("case", "failure"), FAILURES, ids=[f"{c.name}-{f.name}" for c, f in FAILURES])
def test_a_failed_start_is_read_with_its_stage_and_kind(
    case: EngineCase, failure: FailureCase, tmp_path: Path
) -> None:
    events, reader = fed(case, failure.log(tmp_path))
    assert [e for _, e in events] == [LogEvent.FAILED]  # once, on the line that shows it, and never ready
    report = reader.report()
    assert report.failure is not None and report.failure.message
    assert (report.failure.stage, report.failure.kind) == (failure.stage, failure.kind)
    assert report.last_stage is failure.stage and not report.ready
    assert report.error_line_at is not None and report.error_line_at <= events[0][0]
    assert report.failure.is_oom == (failure.kind is FailureKind.OOM)


def test_every_engine_tells_an_out_of_memory_from_a_crash(case: EngineCase) -> None:
    assert {FailureKind.OOM, FailureKind.CRASH} <= {f.kind for f in case.failures}


# --- the HTTP API ----------------------------------------------------------------------------------


def test_the_paths_of_the_api_join_the_server_url(case: EngineCase) -> None:
    endpoints = case.engine.api.endpoints
    paths = (endpoints.generate, endpoints.health, endpoints.flush_cache, *endpoints.server_info)
    assert all(p.startswith("/") for p in paths) and endpoints.server_info
    assert endpoints.url("http://h:1/", endpoints.generate) == "http://h:1" + endpoints.generate


def test_the_request_builder_and_the_reader_agree_with_the_server(case: EngineCase, live: Live) -> None:
    api, exchange = case.engine.api, exchange_of(case, live)
    ids, wanted = exchange.input_ids, exchange.max_new_tokens
    if exchange.stream_request is not None:
        assert json.loads(api.stream_body(ids, wanted)) == exchange.stream_request
    if exchange.greedy_request is not None:
        assert api.greedy_body(exchange.greedy_input_ids or ids, wanted) == exchange.greedy_request
    whole = StreamAccumulator(0.0, api.stream_reader())
    for n, line in enumerate(exchange.stream_lines):
        whole.feed(line, 0.01 * (n + 1))
    outcome = whole.outcome(len(ids))
    assert outcome.success, outcome.error
    assert (outcome.completion_tokens, outcome.finish_reason) == (wanted, "length")
    assert outcome.ttft_s > 0 and outcome.latency_s >= outcome.ttft_s
    # A stream cut after its first line is a failed request, never a short success.
    cut = StreamAccumulator(0.0, api.stream_reader())
    cut.feed(exchange.stream_lines[0], 0.01)
    assert not cut.outcome(len(ids)).success
    greedy = api.greedy_ids(exchange.greedy_answer)
    assert greedy is not None and len(greedy) == wanted
    assert api.greedy_ids({"unrelated": 1}) is None
    assert api.greedy_margins({"unrelated": 1}) is None  # no log-probabilities: the strict check
    accept = api.accept_length(exchange.server_info)
    assert case.config.speculative and accept is not None and accept >= 1.0
    assert api.accept_length({}) is None


# --- a live server ---------------------------------------------------------------------------------


def test_a_live_server_is_watched_served_and_stopped(case: EngineCase, live: Live) -> None:
    run = live(case)
    assert case.ready_marker in run.ready_line, run.log[-2000:]
    assert run.plan.argv[1:3] == ("-m", case.module)
    assert run.healthy and run.outcomes and all(o.success for o in run.outcomes), run.outcomes
    assert {o.completion_tokens for o in run.outcomes} == {8}
    assert [len(g) for g in run.greedy] == [8, 8]
    assert run.flushed
    assert run.accept_length is not None and run.accept_length >= 1.0
    # Stopped by SIGINT within its grace, its whole tree gone, and a clean stop is no failure in its log.
    assert run.stop.signal_used == "SIGINT" and run.stop.killed == () and run.left == ()
    assert read_all(case.engine.log_parser(), run.log).report().failure is None
