"""A server process we started, and only that: its whole tree is stopped by pid, never by name.

Any engine's server runs so (`ServerProcess`, from a `engines.launch.LaunchPlan`), and its log is read
as it grows (`LogFollower`). The server dies with the process that started it: on Linux it asks the
kernel for SIGKILL when its parent dies (``PR_SET_PDEATHSIG``), so a trial worker (or a driver) killed
with SIGKILL leaves no server listening and holding GPU memory. It leads a process group of its own,
which the trial stops whole: a launcher may kill itself with SIGKILL on failure (SGLang's does) and its
children, re-parented away from us, stay in that group. We also remember every descendant we have seen,
for any that left the group.

The parent-death signal fires when the *thread* that forked the server ends, not the process. It holds
here because a server is started and stopped by one call on one stack (`TrialRun.run`: start, watch,
benchmark, and `stop` in a ``finally``): the thread that forked it cannot end while the server should
live. `start` records that thread, and `stop` says so in the log if another thread stops it.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import psutil

from orchestrator.engines.launch import LaunchPlan

log = logging.getLogger(__name__)

# What the child runs between fork and the server's exec (in place: same pid, so the command itself is
# unchanged). In Python rather than a `preexec_fn`, which is unsafe in a process with threads (a Ray
# worker has several). It
# - asks for SIGKILL when its parent dies (PR_SET_PDEATHSIG = 1, Linux only; it survives exec), then
#   checks that the parent (argv[1]) is still its parent: one that died before the request was made
#   would never send the signal;
# - clears the signal mask: a Ray worker runs tasks with SIGINT blocked, a blocked mask survives fork and
#   exec, and the server would never see the SIGINT that stops it cleanly;
# - gives SIGINT its default action back: a driver started in the background by a shell, or under nohup,
#   runs with SIGINT ignored, and an ignored signal stays ignored through exec.
_PDEATHSIG_AND_EXEC = """\
import os, signal, sys
if sys.platform.startswith("linux"):
    import ctypes
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):
        pass
    if os.getppid() != int(sys.argv[1]):
        os._exit(70)
signal.pthread_sigmask(signal.SIG_SETMASK, ())
signal.signal(signal.SIGINT, signal.SIG_DFL)
os.execvp(sys.argv[2], sys.argv[2:])
"""


@dataclass(frozen=True)
class StopReport:
    returncode: int | None
    stop_s: float
    signal_used: str  # "none" (had exited), "SIGINT", or "SIGKILL"
    killed: tuple[int, ...]  # pids that needed SIGKILL


class ServerProcess:
    """A server's process tree; as a context manager, started on entering and stopped (SIGINT, then
    SIGKILL after `stop_grace_s`) on leaving, whichever way the block is left."""

    def __init__(self, plan: LaunchPlan, log_path: Path, stop_grace_s: float = 10.0) -> None:
        self.plan = plan
        self.log_path = log_path
        self.stop_grace_s = stop_grace_s
        self._stop_report: StopReport | None = None  # how the context manager's exit stopped it
        self._popen: subprocess.Popen[bytes] | None = None
        self._tree: dict[int, float] = {}  # pid -> create_time, so a recycled pid is never killed
        self._returncode: int | None = None
        self._forked_by: int | None = None  # the thread whose end would fire the parent-death signal
        self.started_at = 0.0
        self.create_time = 0.0  # the server's, with its pid: what the driver's journal records

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
                [sys.executable, "-c", _PDEATHSIG_AND_EXEC, str(os.getpid()), *self.plan.argv],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                process_group=0,  # its own group, led by the server: stopped whole
            )
        self._forked_by = threading.get_ident()
        self._remember(self._popen.pid)
        self.create_time = self._tree.get(self._popen.pid, 0.0)
        log.info("started server pid %d: %s", self._popen.pid, " ".join(self.plan.masked_argv()))

    @property
    def pid(self) -> int:
        assert self._popen is not None, "start() first"
        return self._popen.pid

    def poll(self) -> int | None:
        """The server's exit code once it has exited, without reaping it: while it is unreaped its pid,
        which is also its group's id, cannot be given to another process, so `stop` may signal the
        group safely."""
        self.refresh_tree()
        if self._popen is None:
            return None
        if self._returncode is None and self._popen.returncode is None:
            try:
                info = os.waitid(os.P_PID, self._popen.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:  # reaped already
                return self._popen.poll()
            if info is not None:
                killed = info.si_code in (os.CLD_KILLED, os.CLD_DUMPED)
                self._returncode = -info.si_status if killed else info.si_status
        return self._returncode if self._popen.returncode is None else self._popen.returncode

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
        if self._forked_by is not None and self._forked_by != threading.get_ident():
            log.warning("server pid %d stopped from another thread than the one that started it", self.pid)
        t0 = time.monotonic()
        self.refresh_tree()
        signal_used = "none"
        if self.poll() is None:
            signal_used = "SIGINT"
            try:
                self._popen.send_signal(signal.SIGINT)
            except ProcessLookupError:
                pass
            deadline = time.monotonic() + grace_s
            while self.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
            if self.poll() is None:
                signal_used = "SIGKILL"
        killed = self.kill_tree()
        if killed:
            signal_used = "SIGKILL"
        rc = self._popen.poll()
        return StopReport(rc, time.monotonic() - t0, signal_used, killed)

    def _group_members(self) -> list[psutil.Process]:
        """The processes still in the server's group (its pid is its group's id)."""
        assert self._popen is not None
        members = []
        for proc in psutil.process_iter():
            try:
                if os.getpgid(proc.pid) == self._popen.pid and proc.status() != psutil.STATUS_ZOMBIE:
                    members.append(proc)
            except (OSError, psutil.Error):
                continue
        return members

    def kill_tree(self) -> tuple[int, ...]:
        self.refresh_tree()
        victims = self.alive_tree()
        if self._popen is not None and self._popen.returncode is None:
            # The leader is not reaped yet, so its pid still names its group and no other: SIGKILL to
            # the group reaches the children that left the tree, which we may never have seen.
            seen = {p.pid for p in victims}
            victims += [p for p in self._group_members() if p.pid not in seen]
            try:
                os.killpg(self._popen.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
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
        self._stop_report = self.stop(self.stop_grace_s)

    def stopped(self) -> StopReport:
        """How leaving the `with` block stopped the server (SIGINT, SIGKILL, what needed killing)."""
        if self._stop_report is None:
            raise RuntimeError("the server is stopped on leaving its `with` block: read this after it")
        return self._stop_report


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
