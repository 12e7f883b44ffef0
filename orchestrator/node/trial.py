"""One trial on one node: GPUs clean? start the server, watch it, benchmark it, stop it, GPUs clean.

This runs inside a Ray task on the node. It never touches MLflow or Optuna: it returns one frozen
`TrialResult` and the driver records it.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import aiohttp

from orchestrator import dashboard_metrics
from orchestrator.bench.client import run_stage
from orchestrator.bench.control import server_accept_length, wait_healthy
from orchestrator.bench.greedy import check_requests, greedy_outputs
from orchestrator.bench.metrics import stage_metrics
from orchestrator.bench.traffic import build_requests, dataset_breakdown
from orchestrator.bench.workload import synthetic_requests
from orchestrator.config import adaptive
from orchestrator.engines import engine_for
from orchestrator.engines.engine import LogReader
from orchestrator.engines.launch import LaunchPlan
from orchestrator.engines.logrecords import LogEvent, LogReport, ResolvedArgs
from orchestrator.engines.process import LogFollower, ServerProcess
from orchestrator.errors import TrialError
from orchestrator.gpu import wait_clean
from orchestrator.node.backends import NodeBackend, current_node_id, free_port, launch_profile, make_node
from orchestrator.node.trial_files import fresh_folder, read_capped
from orchestrator.node.trial_load import kv_probe, under_load_failure
from orchestrator.records import (
    Failure,
    FailureKind,
    FailureStage,
    GpuSample,
    ResolvedLaunch,
    StageMetrics,
    TrialResult,
    TrialStatus,
)
from orchestrator.secrets import scrub, scrub_file, scrub_text
from orchestrator.trial_events import (
    Phase,
    PhaseEvent,
    PhaseHook,
    ServerId,
    TrialRequest,
    failure_stage,
    startup_phase,
)

log = logging.getLogger(__name__)

StageHook = Callable[[int, StageMetrics], bool]  # (step, metrics) -> keep going?


# How long a stage whose requests failed waits for the server's log or exit to say why: SGLang writes its
# traceback when its scheduler raises, before the connections drop, so this is rarely waited out.
STAGE_FAILURE_GRACE_S = 8.0


@dataclass
class _Startup:
    ready: bool = False
    failure: Failure | None = None
    error_at: float | None = None
    startup_s: float | None = None


def run_trial(
    request: TrialRequest, on_stage: StageHook | None = None, on_phase: PhaseHook | None = None
) -> TrialResult:
    """Run one trial; never raises for anything the server or the benchmark does. When its own code
    raises, it raises `TrialError`: the exception's type, words and traceback and the stage the trial had
    reached, as fields that cross Ray (the driver reads them, never Ray's text)."""
    trial: TrialRun | None = None
    try:
        node = make_node(
            request.spec, current_node_id(), launch_profile(request.spec, request.sim_profile, request.number)
        )
        trial = TrialRun(request, node, on_stage, on_phase)
        return trial.run()
    except Exception as err:
        error = TrialError.from_exception(err, failure_stage(trial.phase if trial else None))
        # The traceback goes into the trial's result.json: no secret of the spec's server flags with it.
        secrets = request.spec.server.secrets()
        error.message, error.detail = scrub_text(error.message, secrets), scrub_text(error.detail, secrets)
        raise error from err


class TrialRun:
    def __init__(
        self,
        request: TrialRequest,
        node: NodeBackend,
        on_stage: StageHook | None,
        on_phase: PhaseHook | None = None,
    ) -> None:
        self.req = request
        self.spec = request.spec
        self.node = node
        self.on_stage = on_stage
        self.on_phase = on_phase
        self.phase: Phase | None = None
        self.server: ServerId | None = None  # once launched: sent with every phase event
        self.workdir = fresh_folder(Path(request.workdir))
        self.log_path = self.workdir / "server.log"
        self.engine = engine_for(self.spec.engine)
        self.api = self.engine.api
        self.parser: LogReader = self.engine.log_parser()
        self.t0 = time.monotonic()
        self.t0_unix = time.time()
        self.notes: list[str] = []
        self._stages_done: list[StageMetrics] = []
        self._greedy: tuple[tuple[int, ...], ...] = ()

    # -- the phases ---------------------------------------------------------------------------------

    def _enter(self, phase: Phase, step: int | None = None) -> None:
        """Tell the driver the trial moved on (its progress line); never fails the trial."""
        if phase is self.phase and step is None:
            return
        self.phase = phase  # kept without a hook too: a failure's stage (`run_trial`)
        if self.on_phase is None:
            return
        steps = len(self.spec.workload.concurrency) if step is not None else None
        event = PhaseEvent(
            self.req.number, phase, self.t0_unix, time.time(), self.node.node_id, step, steps, self.server
        )
        try:
            self.on_phase(event)
        except Exception:
            log.debug("phase hook failed", exc_info=True)

    def run(self) -> TrialResult:
        self._enter(Phase.GPU_CHECK)
        probe = self.node.probe()
        missing = self.node.missing_paths()
        if missing:
            return self._result(
                TrialStatus.FAILED,
                failure=Failure(
                    FailureStage.LAUNCH,
                    FailureKind.CRASH,
                    f"model path not found on node {self.node.node_id}: {', '.join(missing)}",
                ),
            )
        version = self.node.version()
        refused = self.engine.unsupported(self.req.config, version)
        if refused:
            return self._result(
                TrialStatus.FAILED, failure=Failure(FailureStage.LAUNCH, FailureKind.CRASH, refused)
            )
        before = wait_clean(probe, self.spec.node.clean_threshold_mib, self.spec.timeouts.gpu_clean_s)
        dashboard_metrics.record_gpu_samples(self.node.node_id, before.samples, before.clean)
        if not before.clean:
            return self._result(
                TrialStatus.FAILED,
                failure=Failure(FailureStage.GPU_CHECK, FailureKind.GPU_NOT_CLEAN, before.describe()),
                gpu_before=before.samples,
            )
        port = free_port(self.spec.server.host)
        plan = self.node.plan(self.req.config, port, self.workdir)
        (self.workdir / "command.txt").write_text(" ".join(plan.masked_argv()) + "\n")
        # Started on entering, stopped on leaving, whichever way the block is left: no path leaves a server
        # behind (a raise in the trial's own code stops it too, and keeps the phase it raised in).
        with ServerProcess(plan, self.log_path, stop_grace_s=self.spec.timeouts.stop_s) as server:
            # The driver's journal records the server now: a driver killed mid-trial leaves the next one
            # its pid and create time, to stop it should it have outlived its trial.
            self.server = ServerId(server.pid, server.create_time, socket.gethostname())
            self._enter(Phase.LAUNCH)
            startup = self._watch_startup(server)
            stages: tuple[StageMetrics, ...] = ()
            accept: float | None = None
            status = TrialStatus.OK
            failure = startup.failure
            if startup.ready:
                status, failure, stages, accept = self._benchmark(server, plan)
            elif failure is not None and failure.is_oom:
                status = TrialStatus.OOM
            elif failure is not None and failure.kind is FailureKind.TIMEOUT:
                status = TrialStatus.TIMEOUT
            else:
                status = TrialStatus.FAILED
            self._enter(Phase.STOPPING)
        stop = server.stopped()
        if stop.killed:
            self.notes.append(
                f"SIGKILLed {len(stop.killed)} process(es) left after stop: {list(stop.killed)}"
            )
        after = wait_clean(probe, self.spec.node.clean_threshold_mib, self.spec.timeouts.gpu_clean_s)
        dashboard_metrics.record_gpu_samples(self.node.node_id, after.samples, after.clean)
        oom_to_clean = None
        if startup.error_at is not None and after.clean:
            oom_to_clean = time.monotonic() - startup.error_at
        if not after.clean:
            self.notes.append(f"GPUs not clean after the trial: {after.describe()}")
        return self._result(
            status,
            failure=failure,
            plan=plan,
            stages=stages,
            accept=accept,
            startup_s=startup.startup_s,
            oom_to_clean_s=oom_to_clean,
            gpu_before=before.samples,
            gpu_after=after.samples,
        )

    def _watch_startup(self, server: ServerProcess) -> _Startup:
        """Follow the log until ready, failed, exited, or out of time."""
        follower = LogFollower(self.log_path)
        out = _Startup()
        deadline = self.t0 + self.spec.timeouts.startup_s
        hang_grace = self.spec.timeouts.hang_after_error_s
        while True:
            now = time.monotonic()
            for line in follower.new_lines():
                event = self.parser.feed(line, now)
                if event is LogEvent.READY:
                    out.ready = True
                    out.startup_s = now - server.started_at
                    return out
                if event is LogEvent.FAILED and out.error_at is None:
                    out.error_at = now
            rc = server.poll()
            report = self.parser.report()
            self._enter(startup_phase(report.last_stage, self.phase))
            if rc is not None:
                for line in follower.new_lines():
                    self.parser.feed(line, time.monotonic())
                report = self.parser.report()
                out.failure = report.failure or Failure(
                    report.last_stage, FailureKind.CRASH, f"server exited with code {rc} before it was ready"
                )
                if out.error_at is None:
                    out.error_at = time.monotonic()
                return out
            if out.error_at is not None and now - out.error_at > hang_grace:
                # An error line and then no exit: SGLang hangs like this holding its GPU memory.
                failure = report.failure
                assert failure is not None
                if not failure.is_oom:
                    failure = replace(failure, kind=FailureKind.HANG)
                out.failure = replace(failure, detail=(failure.detail + " (no exit after the error: killed)"))
                return out
            if now > deadline:
                out.failure = Failure(
                    report.last_stage,
                    FailureKind.TIMEOUT,
                    f"not ready after {self.spec.timeouts.startup_s:.0f} s (startup timeout)",
                )
                return out
            time.sleep(0.05)

    def _benchmark(
        self, server: ServerProcess, plan: LaunchPlan
    ) -> tuple[TrialStatus, Failure | None, tuple[StageMetrics, ...], float | None]:
        try:
            return asyncio.run(
                asyncio.wait_for(self._bench_async(server, plan), timeout=self.spec.timeouts.benchmark_s)
            )
        except TimeoutError:
            return (
                TrialStatus.TIMEOUT,
                Failure(
                    FailureStage.UNDER_LOAD,
                    FailureKind.TIMEOUT,
                    f"benchmark did not finish in {self.spec.timeouts.benchmark_s:.0f} s (server hung?)",
                ),
                tuple(self._stages_done),
                None,
            )

    async def _bench_async(
        self, server: ServerProcess, plan: LaunchPlan
    ) -> tuple[TrialStatus, Failure | None, tuple[StageMetrics, ...], float | None]:
        wl = self.spec.workload
        url = plan.base_url
        connector = aiohttp.TCPConnector(limit=0)
        # SGLang with --api-key answers everything but /health and /metrics with 401 unless it is sent.
        key = self.spec.server.api_key()
        headers = {"Authorization": f"Bearer {key}"} if key else None
        async with aiohttp.ClientSession(connector=connector, headers=headers) as session:
            if not await wait_healthy(url, session, timeout_s=60.0, endpoints=self.api.endpoints):
                status, failure = self._under_load_failure(
                    server, f"server never answered {self.api.endpoints.health} after ready"
                )
                return status, failure, (), None
            if wl.warmup_prompts:
                self._enter(Phase.WARMUP)
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
                self._enter(Phase.BENCHMARK, step)
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
                self._stages_done.append(metrics)
                if await self._stage_failed(server, metrics):
                    status, failure = self._under_load_failure(server, self._stage_errors(metrics))
                    return status, failure, tuple(self._stages_done), None
                if self.req.config.speculative:
                    accept = await server_accept_length(url, session, api=self.api)
                if self.on_stage is not None and not self.on_stage(step, metrics):
                    self.notes.append(f"pruned after stage {step} (concurrency {concurrency})")
                    break
            if self.spec.budget.baseline:  # the lossless check: compared with the baseline's on the driver
                try:
                    self._greedy = await greedy_outputs(url, session, check_requests(self.spec), api=self.api)
                except (aiohttp.ClientError, TimeoutError, RuntimeError) as err:
                    self.notes.append(f"lossless check: no greedy outputs: {err}")
        return TrialStatus.OK, None, tuple(self._stages_done), accept

    async def _stage_failed(self, server: ServerProcess, metrics: StageMetrics) -> bool:
        """Whether the server failed during the stage: it exited, served nothing, its log reports a
        failure, or requests failed. A dying SGLang keeps its process for seconds after its scheduler
        raised (0.5.17 out of memory under load: SIGQUIT, 5 s before its crash diagnostics, then its
        tree is killed), so the stage can end on dropped connections while the server still runs and
        whole requests completed before (the llama8b-live fixture, trial 2): the log, not the process,
        says what happened, and it is given a moment to say it."""
        deadline = time.monotonic() + STAGE_FAILURE_GRACE_S
        while True:
            report = self._read_log()
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
            self._read_log,
            lambda: self._enter(Phase.KV_PROBE),
            self.api,
        )
        if note:
            self.notes.append(note)
        return failure

    def _read_log(self) -> LogReport[ResolvedArgs]:
        self._drain_log()
        return self.parser.report()

    def _drain_log(self) -> None:
        follower = LogFollower(self.log_path)
        # Re-reading from the start is cheap next to a benchmark stage and keeps the parser in one place.
        parser = self.engine.log_parser()
        for line in follower.new_lines():
            parser.feed(line)
        self.parser = parser

    def _under_load_failure(self, server: ServerProcess, why: str) -> tuple[TrialStatus, Failure]:
        return under_load_failure(self._read_log(), server.poll() is not None, why)

    # -- the record ---------------------------------------------------------------------------------

    def _result(
        self,
        status: TrialStatus,
        *,
        failure: Failure | None = None,
        plan: LaunchPlan | None = None,
        stages: tuple[StageMetrics, ...] = (),
        accept: float | None = None,
        startup_s: float | None = None,
        oom_to_clean_s: float | None = None,
        gpu_before: tuple[GpuSample, ...] = (),
        gpu_after: tuple[GpuSample, ...] = (),
    ) -> TrialResult:
        secrets = self.spec.server.secrets()
        scrub_file(self.log_path, secrets)
        log_text = read_capped(self.log_path)
        report = self.parser.report()
        resolved = report.args.launch_values() if report.args is not None else ResolvedLaunch()
        result = TrialResult(
            config=self.req.config,
            status=status,
            node_id=self.node.node_id,
            command=plan.masked_argv() if plan else (),
            startup_s=startup_s,
            failure=failure,
            stages=stages,
            server_accept_length=accept,
            memory=report.memory,
            resolved_args=resolved,
            server_version=self.node.version(),
            log_path=str(self.log_path),
            log_text=log_text,
            oom_to_clean_s=oom_to_clean_s,
            gpu_before=gpu_before,
            gpu_after=gpu_after,
            wall_s=time.monotonic() - self.t0,
            started_unix=self.t0_unix,
            finished_unix=time.time(),
            notes=tuple(self.notes),
            dataset=self.spec.workload.dataset_label,
            adaptive_config=adaptive.saved_config(self.workdir) if plan else "",
            adaptive_switches=len(report.adaptive_switches),
            greedy_outputs=self._greedy,
        )
        return scrub(result, secrets)
