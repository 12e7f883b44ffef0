"""A trial's benchmark of its ready server: warm-up, the KV probe, one stage per concurrency level (each
reported to the driver, which may prune), and the greedy outputs of the lossless check.

A stage that failed is read off the server's log (`trial_load.under_load_failure`), which the trial
re-reads for it (`read_log`): the trial keeps the one log reader its result is made from.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import replace

import aiohttp

from orchestrator.bench.client import run_stage
from orchestrator.bench.control import server_accept_length, wait_healthy
from orchestrator.bench.greedy import GreedyAnswers, check_requests, greedy_answers
from orchestrator.bench.metrics import stage_metrics
from orchestrator.bench.traffic import build_requests, dataset_breakdown
from orchestrator.bench.workload import synthetic_requests
from orchestrator.engines.engine import Engine
from orchestrator.engines.launch import LaunchPlan
from orchestrator.engines.logrecords import LogReport, ResolvedArgs
from orchestrator.engines.process import ServerProcess
from orchestrator.node.trial_load import kv_probe, under_load_failure
from orchestrator.records import Failure, FailureKind, FailureStage, StageMetrics, TrialStatus
from orchestrator.trial_events import Phase, TrialRequest

StageHook = Callable[[int, StageMetrics], bool]  # (step, metrics) -> keep going?
# What a benchmark ends with: the status, its failure, the stages measured, the server's accept length.
BenchOutcome = tuple[TrialStatus, Failure | None, tuple[StageMetrics, ...], float | None]

# How long a stage whose requests failed waits for the server's log or exit to say why: SGLang writes its
# traceback when its scheduler raises, before the connections drop, so this is rarely waited out.
STAGE_FAILURE_GRACE_S = 8.0


class StageBenchmark:
    """The benchmark of one trial's server; `stages_done` and `greedy` hold what it measured so far."""

    def __init__(
        self,
        request: TrialRequest,
        engine: Engine,
        read_log: Callable[[], LogReport[ResolvedArgs]],
        enter: Callable[[Phase, int | None], None],
        on_stage: StageHook | None,
        notes: list[str],
    ) -> None:
        self.req = request
        self.spec = request.spec
        self.engine = engine
        self.api = engine.api
        self.read_log = read_log
        self.enter = enter  # the trial's phase: its progress line, and a failure's stage
        self.on_stage = on_stage
        self.notes = notes  # the trial's own list: its result's notes
        self.stages_done: list[StageMetrics] = []
        self.greedy = GreedyAnswers((), ())

    def run(self, server: ServerProcess, plan: LaunchPlan) -> BenchOutcome:
        try:
            return asyncio.run(
                asyncio.wait_for(self._run_async(server, plan), timeout=self.spec.timeouts.benchmark_s)
            )
        except TimeoutError:
            return (
                TrialStatus.TIMEOUT,
                Failure(
                    FailureStage.UNDER_LOAD,
                    FailureKind.TIMEOUT,
                    f"benchmark did not finish in {self.spec.timeouts.benchmark_s:.0f} s (server hung?)",
                ),
                tuple(self.stages_done),
                None,
            )

    async def _run_async(self, server: ServerProcess, plan: LaunchPlan) -> BenchOutcome:
        wl = self.spec.workload
        url = plan.base_url
        connector = aiohttp.TCPConnector(limit=0)
        # SGLang with --api-key answers everything but /health and /metrics with 401 unless it is sent.
        key = self.spec.server_facts.api_key
        headers = {"Authorization": f"Bearer {key}"} if key else None
        async with aiohttp.ClientSession(connector=connector, headers=headers) as session:
            if not await wait_healthy(url, session, timeout_s=60.0, endpoints=self.api.endpoints):
                status, failure = self._under_load_failure(
                    server, f"server never answered {self.api.endpoints.health} after ready"
                )
                return status, failure, (), None
            if wl.warmup_prompts:
                self.enter(Phase.WARMUP, None)
                warm = synthetic_requests(
                    wl.warmup_prompts,
                    min(wl.input_len, 64),
                    min(wl.output_len, 16),
                    wl.vocab_size,
                    wl.seed + 7,
                )
                await run_stage(
                    url,
                    warm,
                    concurrency=wl.warmup_prompts,
                    api=self.api,
                    timeout_s=120.0,
                    session=session,
                )
            pressure = await self._kv_probe(url, session)
            if pressure is not None:
                return TrialStatus.KV_PRESSURE, pressure, (), None
            requests = build_requests(self.spec)
            accept: float | None = None
            for step, concurrency in enumerate(wl.concurrency):
                self.enter(Phase.BENCHMARK, step)
                await self.engine.flush_cache(url, session)
                outcomes, duration = await run_stage(
                    url,
                    requests,
                    concurrency,
                    api=self.api,
                    timeout_s=self.spec.timeouts.benchmark_s,
                    session=session,
                    min_duration_s=wl.min_stage_s,
                    min_tokens=wl.min_stage_tokens,
                )
                metrics = stage_metrics(concurrency, outcomes, duration)
                metrics = replace(
                    metrics, by_dataset=dataset_breakdown(concurrency, requests, outcomes, duration)
                )
                self.stages_done.append(metrics)
                if await self._stage_failed(server, metrics):
                    status, failure = self._under_load_failure(server, self._stage_errors(metrics))
                    return status, failure, tuple(self.stages_done), None
                if self.req.config.speculative:
                    accept = await server_accept_length(url, session, api=self.api)
                if self.on_stage is not None and not self.on_stage(step, metrics):
                    self.notes.append(f"pruned after stage {step} (concurrency {concurrency})")
                    break
            if self.spec.budget.baseline:  # the lossless check: compared with the baseline's on the driver
                try:
                    # only the server without speculation scores its answers: the margins read are its
                    scored = not self.req.config.speculative
                    self.greedy = await greedy_answers(
                        url, session, check_requests(self.spec), api=self.api, scored=scored
                    )
                except (aiohttp.ClientError, TimeoutError, RuntimeError) as err:
                    self.notes.append(f"lossless check: no greedy outputs: {err}")
        return TrialStatus.OK, None, tuple(self.stages_done), accept

    async def _stage_failed(self, server: ServerProcess, metrics: StageMetrics) -> bool:
        """Whether the server failed during the stage: it exited, served nothing, its log reports a
        failure, or requests failed. A dying SGLang keeps its process for seconds after its scheduler
        raised (0.5.17 out of memory under load: SIGQUIT, 5 s before its crash diagnostics, then its
        tree is killed), so the stage can end on dropped connections while the server still runs and
        whole requests completed before (the llama8b-live fixture, trial 2): the log, not the process,
        says what happened, and it is given a moment to say it."""
        deadline = time.monotonic() + STAGE_FAILURE_GRACE_S
        while True:
            report = self.read_log()
            if server.poll() is not None or metrics.completed == 0:
                return True
            if report.failure is not None or report.runtime_oom:
                return True
            if not metrics.failed:
                return False
            if time.monotonic() >= deadline:
                return True  # requests failed and nothing says why: the stage did not measure the server
            await asyncio.sleep(0.25)

    @staticmethod
    def _stage_errors(metrics: StageMetrics) -> str:
        errors = "; ".join(metrics.errors)
        if metrics.failed and metrics.completed:
            failed = f"{metrics.failed} of {metrics.num_requests} requests failed"
            return f"{failed} at concurrency {metrics.concurrency}: {errors}"
        return errors

    async def _kv_probe(self, url: str, session: aiohttp.ClientSession) -> Failure | None:
        failure, note = await kv_probe(
            url,
            session,
            self.spec,
            self.req.config,
            self.read_log,
            lambda: self.enter(Phase.KV_PROBE, None),
            self.api,
        )
        if note:
            self.notes.append(note)
        return failure

    def _under_load_failure(self, server: ServerProcess, why: str) -> tuple[TrialStatus, Failure]:
        return under_load_failure(self.read_log(), server.poll() is not None, why)
