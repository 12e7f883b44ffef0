"""One trial on one node: GPUs clean? start the server, watch it, benchmark it, stop it, GPUs clean.

This runs inside a Ray task on the node. It never touches MLflow or Optuna: it returns one frozen
`TrialResult` and the driver records it.
"""

from __future__ import annotations

import logging
import socket
import time
from dataclasses import replace
from pathlib import Path

from orchestrator import dashboard_metrics
from orchestrator.bench.greedy import GreedyAnswers
from orchestrator.config import adaptive
from orchestrator.engines import engine_for
from orchestrator.engines.engine import LogReader
from orchestrator.engines.launch import LaunchPlan
from orchestrator.engines.logrecords import LogReport, ResolvedArgs
from orchestrator.engines.process import LogFollower, ServerProcess
from orchestrator.errors import TrialError
from orchestrator.gpu import wait_clean
from orchestrator.node.backends import NodeBackend, free_port, launch_profile, local_node_id, make_node
from orchestrator.node.trial_bench import BenchOutcome, StageBenchmark, StageHook
from orchestrator.node.trial_files import fresh_folder
from orchestrator.node.trial_startup import Startup, watch_startup
from orchestrator.records import (
    Failure,
    FailureKind,
    FailureStage,
    GpuSample,
    ResolvedLaunch,
    StageMetrics,
    TrialResult,
    TrialStatus,
    machine_of,
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
from orchestrator.trial_log import read_capped

log = logging.getLogger(__name__)


def run_trial(
    request: TrialRequest,
    on_stage: StageHook | None = None,
    on_phase: PhaseHook | None = None,
    node_id: str | None = None,
) -> TrialResult:
    """Run one trial on the node ``node_id`` (the scheduler's name for it; None: this process's,
    `local_node_id`); never raises for anything the server or the benchmark does. When its own code
    raises, it raises `TrialError`: the exception's type, words and traceback and the stage the trial had
    reached, as fields that cross Ray (the driver reads them, never Ray's text)."""
    trial: TrialRun | None = None
    try:
        node = make_node(
            request.spec,
            node_id if node_id is not None else local_node_id(),
            launch_profile(request.spec, request.sim_profile, request.number),
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
        self.machine = ""  # its GPUs' UUIDs once checked: sent with every later phase event
        self.workdir = fresh_folder(Path(request.workdir))
        self.log_path = self.workdir / "server.log"
        self.engine = engine_for(self.spec.engine)
        self.api = self.engine.api
        self.parser: LogReader = self.engine.log_parser()
        self.t0 = time.monotonic()
        self.t0_unix = time.time()
        self.notes: list[str] = []
        self._greedy = GreedyAnswers((), ())

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
            self.req.number,
            phase,
            self.t0_unix,
            time.time(),
            self.node.node_id,
            step,
            steps,
            self.server,
            self.machine,
        )
        try:
            self.on_phase(event)
        except Exception:
            log.debug("phase hook failed", exc_info=True)

    def run(self) -> TrialResult:
        """The trial, from the GPU check to the GPUs clean again; no secret of the spec's server flags in
        what it sends back, whichever way it ended."""
        return scrub(self._run(), self.spec.server.secrets())

    def _run(self) -> TrialResult:
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
        self.machine = machine_of(before.samples)
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
        # What only a launched server measures; the early returns above keep `TrialResult`'s defaults.
        return replace(
            self._result(status, failure, plan, gpu_before=before.samples),
            stages=stages,
            server_accept_length=accept,
            startup_s=startup.startup_s,
            oom_to_clean_s=oom_to_clean,
            gpu_after=after.samples,
        )

    def _watch_startup(self, server: ServerProcess) -> Startup:
        """Follow the log until ready, failed, exited, or out of time (`trial_startup.watch_startup`)."""
        return watch_startup(
            server,
            self.log_path,
            self.parser,
            self.spec.timeouts,
            self.t0,
            lambda stage: self._enter(startup_phase(stage, self.phase)),
        )

    def _benchmark(self, server: ServerProcess, plan: LaunchPlan) -> BenchOutcome:
        """Warm-up, the KV probe, the stages and the greedy outputs (`trial_bench.StageBenchmark`)."""
        bench = StageBenchmark(self.req, self.engine, self._read_log, self._enter, self.on_stage, self.notes)
        outcome = bench.run(server, plan)
        self._greedy = bench.greedy
        return outcome

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

    # -- the record ---------------------------------------------------------------------------------

    def _result(
        self,
        status: TrialStatus,
        failure: Failure | None = None,
        plan: LaunchPlan | None = None,
        *,
        gpu_before: tuple[GpuSample, ...] = (),
    ) -> TrialResult:
        """What the trial knows however far it got (its log, notes, times, greedy outputs); `run` scrubs
        it. The figures only a launched server measures are left to `_run`, which sets them on this."""
        scrub_file(self.log_path, self.spec.server.secrets())
        log_text = read_capped(self.log_path)
        report = self.parser.report()
        resolved = report.args.launch_values() if report.args is not None else ResolvedLaunch()
        return TrialResult(
            config=self.req.config,
            status=status,
            node_id=self.node.node_id,
            command=plan.masked_argv() if plan else (),
            failure=failure,
            memory=report.memory,
            resolved_args=resolved,
            server_version=self.node.version(),
            log_path=str(self.log_path),
            log_text=log_text,
            gpu_before=gpu_before,
            wall_s=time.monotonic() - self.t0,
            started_unix=self.t0_unix,
            finished_unix=time.time(),
            notes=tuple(self.notes),
            dataset=self.spec.workload.dataset_label,
            adaptive_config=adaptive.saved_config(self.workdir) if plan else "",
            adaptive_switches=len(report.adaptive_switches),
            greedy_outputs=self._greedy.outputs,
            greedy_margins=self._greedy.margins,
        )
