"""A trial's start-up watch: follow the server's log until it is ready, failed, exited, or out of time.

It only reads: the log through the engine's reader, and whether the process has exited. The trial decides
what the outcome means for its status and stops the server itself.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from orchestrator.engines.engine import LogReader
from orchestrator.engines.logrecords import LogEvent
from orchestrator.engines.process import LogFollower, ServerProcess
from orchestrator.records import Failure, FailureKind, FailureStage
from orchestrator.spec.sweep_spec import TimeoutSpec


@dataclass
class Startup:
    """What the watch saw: ready, or the failure; when the first error line came; how long it took."""

    ready: bool = False
    failure: Failure | None = None
    error_at: float | None = None
    startup_s: float | None = None


def watch_startup(
    server: ServerProcess,
    log_path: Path,
    parser: LogReader,
    timeouts: TimeoutSpec,
    t0: float,
    on_stage: Callable[[FailureStage], None],
) -> Startup:
    """Follow the log until ready, failed, exited, or out of time (`timeouts.startup_s` after `t0`, the
    trial's own start). `on_stage` hears each stage the log passes through, in order (the progress
    line): one poll may read several, and a stage heard only at the poll's end was never shown (the
    capture of a server whose capture and warm-up lines came together)."""
    follower = LogFollower(log_path)
    out = Startup()
    deadline = t0 + timeouts.startup_s
    hang_grace = timeouts.hang_after_error_s
    while True:
        now = time.monotonic()
        for line in follower.new_lines():
            event = parser.feed(line, now)
            if event is not LogEvent.READY:  # ready: the trial's own phases take over
                on_stage(parser.report().last_stage)
            if event is LogEvent.READY:
                out.ready = True
                out.startup_s = now - server.started_at
                return out
            if event is LogEvent.FAILED and out.error_at is None:
                out.error_at = now
        rc = server.poll()
        report = parser.report()
        on_stage(report.last_stage)
        if rc is not None:
            for line in follower.new_lines():
                parser.feed(line, time.monotonic())
            report = parser.report()
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
                f"not ready after {timeouts.startup_s:.0f} s (startup timeout)",
            )
            return out
        time.sleep(0.05)
