"""A server process we started, and only that: its whole tree is stopped by pid, never by name.

The server runs as a child in the trial worker's own process group (not a new session), so that Ray
reaps it if the worker dies. We remember every descendant we have seen, because SGLang's launcher kills
itself with SIGKILL on failure and its children are re-parented away from us.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import psutil

from orchestrator.server.command import LaunchPlan

log = logging.getLogger(__name__)

# A Ray worker runs tasks with SIGINT blocked, and a blocked mask survives fork and exec: the server
# would never see the SIGINT that stops it cleanly and would always end in SIGKILL. This trampoline
# clears the mask, then execs the server in place (same pid), so the command itself is unchanged.
_UNBLOCK_AND_EXEC = (
    "import os, signal, sys; signal.pthread_sigmask(signal.SIG_SETMASK, ()); "
    "os.execvp(sys.argv[1], sys.argv[1:])"
)


@dataclass(frozen=True)
class StopReport:
    returncode: int | None
    stop_s: float
    signal_used: str  # "none" (had exited), "SIGINT", or "SIGKILL"
    killed: tuple[int, ...]  # pids that needed SIGKILL


class ServerProcess:
    def __init__(self, plan: LaunchPlan, log_path: Path) -> None:
        self.plan = plan
        self.log_path = log_path
        self._popen: subprocess.Popen[bytes] | None = None
        self._tree: dict[int, float] = {}  # pid -> create_time, so a recycled pid is never killed
        self.started_at = 0.0

    def start(self) -> None:
        env = dict(os.environ)
        env.update(dict(self.plan.env))
        env.setdefault("PYTHONUNBUFFERED", "1")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("xb") as out:  # never append to an older run's log
            out.write(("$ " + " ".join(self.plan.masked_argv()) + "\n").encode())
            out.flush()
            self.started_at = time.monotonic()
            # An argument list, never a shell.
            self._popen = subprocess.Popen(
                [sys.executable, "-c", _UNBLOCK_AND_EXEC, *self.plan.argv],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
            )
        self._remember(self._popen.pid)
        log.info("started server pid %d: %s", self._popen.pid, " ".join(self.plan.masked_argv()))

    @property
    def pid(self) -> int:
        assert self._popen is not None, "start() first"
        return self._popen.pid

    def poll(self) -> int | None:
        self.refresh_tree()
        return self._popen.poll() if self._popen else None

    def refresh_tree(self) -> None:
        """Add the current descendants of the server to the set we will stop."""
        if self._popen is None:
            return
        try:
            root = psutil.Process(self._popen.pid)
            for child in root.children(recursive=True):
                self._remember(child.pid)
        except psutil.Error:
            pass

    def _remember(self, pid: int) -> None:
        try:
            self._tree.setdefault(pid, psutil.Process(pid).create_time())
        except psutil.Error:
            pass

    def alive_tree(self) -> list[psutil.Process]:
        alive = []
        for pid, created in self._tree.items():
            try:
                proc = psutil.Process(pid)
                if proc.create_time() == created and proc.status() != psutil.STATUS_ZOMBIE:
                    alive.append(proc)
            except psutil.Error:
                continue
        return alive

    def stop(self, grace_s: float) -> StopReport:
        """SIGINT first (SGLang 0.5.17 exits cleanly in ~3 s; SIGTERM ends in its own SIGKILL), then
        SIGKILL whatever of the tree is left."""
        if self._popen is None:
            return StopReport(None, 0.0, "none", ())
        t0 = time.monotonic()
        self.refresh_tree()
        signal_used = "none"
        if self._popen.poll() is None:
            signal_used = "SIGINT"
            try:
                self._popen.send_signal(signal.SIGINT)
            except ProcessLookupError:
                pass
            try:
                self._popen.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                signal_used = "SIGKILL"
        killed = self.kill_tree()
        if killed:
            signal_used = "SIGKILL"
        rc = self._popen.poll()
        return StopReport(rc, time.monotonic() - t0, signal_used, killed)

    def kill_tree(self) -> tuple[int, ...]:
        self.refresh_tree()
        victims = self.alive_tree()
        for proc in victims:
            try:
                proc.kill()
            except psutil.Error:
                pass
        psutil.wait_procs(victims, timeout=10)
        if self._popen is not None:
            try:
                self._popen.wait(timeout=5)
            except subprocess.TimeoutExpired:
                log.error("server pid %d survived SIGKILL", self._popen.pid)
        return tuple(p.pid for p in victims)

    def __enter__(self) -> ServerProcess:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop(grace_s=10.0)


class LogFollower:
    """Reads the complete lines appended to a log file since the last call."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0
        self._partial = b""

    def new_lines(self) -> list[str]:
        try:
            with self.path.open("rb") as f:
                f.seek(self._offset)
                chunk = f.read()
        except FileNotFoundError:
            return []
        self._offset += len(chunk)
        data = self._partial + chunk
        *lines, self._partial = data.split(b"\n")
        # Progress bars redraw with carriage returns: each redraw is a line of its own to the parser.
        out: list[str] = []
        for line in lines:
            out.extend(seg for seg in line.decode(errors="replace").split("\r") if seg)
        return out
