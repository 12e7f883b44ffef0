"""Stop what a driver started when the driver dies without stopping it (``kill -9``).

A driver that exits, even on Ctrl-C, stops the Ray head it started (Ray's exit hook): nothing of it is
left a tenth of a second later. Killed with SIGKILL it cannot, and Ray's head did not follow it: its GCS,
raylet, dashboard, DashboardAgent and RuntimeEnvAgent lived on for 30 to 45 s, holding the dashboard's
port, and a trial's worker with them. So a driver that starts Ray starts this watcher first, in a session
of its own (a Ctrl-C to the terminal's group does not reach it). It reads the driver's descendants every
`SNAPSHOT_S` (pid and create time) and waits on a pipe whose other end only the driver holds. A driver
that ends its run writes `RELEASED` before it lets go (what it started is then Ray's own exit hook's to
stop, and a driver inside a test process keeps the rest of its process tree). When the pipe closes
without it, the driver was killed: the watcher sends SIGTERM to each process of the last snapshot still
alive with the same create time (a reused pid is never signalled), and SIGKILL to any left after
`GRACE_S`. Only processes the driver started, by id, never by name.
"""

from __future__ import annotations

import argparse
import logging
import os
import select
import signal
import subprocess
import sys
from dataclasses import dataclass

import psutil

log = logging.getLogger(__name__)

SNAPSHOT_S = 0.5  # how stale the list of the driver's processes may be when it dies
GRACE_S = 5.0  # between SIGTERM and SIGKILL: a server shuts down and frees its GPU memory in this time
CREATE_TIME_TOLERANCE_S = 0.05  # as `stale_servers`: psutil's create time is exact to a few ticks
RELEASED = b"released"  # the driver's last word when it ends its run itself


@dataclass(frozen=True)
class Started:
    """A process the driver started, as the watcher last saw it."""

    pid: int
    create_time: float

    def alive(self) -> psutil.Process | None:
        """The process itself when it still runs (not a zombie, not another process under its pid)."""
        try:
            proc = psutil.Process(self.pid)
            if abs(proc.create_time() - self.create_time) > CREATE_TIME_TOLERANCE_S:
                return None
            if proc.status() == psutil.STATUS_ZOMBIE:
                return None
            return proc
        except psutil.Error:
            return None


def descendants(pid: int, exclude: int) -> list[Started]:
    """Every process under ``pid`` now, but ``exclude`` (the watcher itself)."""
    try:
        children = psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []
    found = []
    for child in children:
        try:
            if child.pid != exclude:
                found.append(Started(child.pid, child.create_time()))
        except psutil.Error:
            continue
    return found


def stop(started: list[Started], grace_s: float = GRACE_S) -> list[int]:
    """SIGTERM to each still alive, SIGKILL to those alive ``grace_s`` later; the pids signalled."""
    alive = [proc for s in started if (proc := s.alive()) is not None]
    for proc in alive:
        try:
            proc.send_signal(signal.SIGTERM)
        except psutil.Error:
            continue
    _, left = psutil.wait_procs(alive, timeout=grace_s)
    for proc in left:
        try:
            proc.kill()
        except psutil.Error:
            continue
    return [proc.pid for proc in alive]


def watch(driver_pid: int, pipe_fd: int, snapshot_s: float = SNAPSHOT_S, grace_s: float = GRACE_S) -> int:
    """Snapshot the driver's processes until the pipe closes; then, unless the driver released them, stop
    what is left of the last snapshot. The number of processes signalled."""
    me = os.getpid()
    last: list[Started] = []
    said = b""
    while True:
        ready, _, _ = select.select([pipe_fd], [], [], snapshot_s)
        if ready:
            chunk = os.read(pipe_fd, 4096)
            if not chunk:
                break  # end of file: the driver's end is closed, it has exited
            said += chunk
        if psutil.pid_exists(driver_pid):
            last = descendants(driver_pid, me) or last
    if said == RELEASED:
        return 0
    stopped = stop(last, grace_s)
    if stopped:
        log.warning(
            "the driver %d died; stopped %d process(es) it left: %s", driver_pid, len(stopped), stopped
        )
    return len(stopped)


class Reaper:
    """The driver's side: the watcher's process and the pipe's write end, held until the driver exits."""

    def __init__(self, proc: subprocess.Popen[bytes], write_fd: int) -> None:
        self.proc = proc
        self.write_fd = write_fd

    def release(self) -> None:
        """The driver ends its run itself: the watcher leaves its processes alone and exits."""
        try:
            os.write(self.write_fd, RELEASED)
            os.close(self.write_fd)
        except OSError:
            pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def start_reaper(driver_pid: int | None = None) -> Reaper:
    """Start the watcher of this process (or ``driver_pid``); keep the result alive as long as the driver."""
    read_fd, write_fd = os.pipe()
    os.set_inheritable(read_fd, True)
    proc = subprocess.Popen(
        [sys.executable, "-m", __name__, "--pid", str(driver_pid or os.getpid()), "--fd", str(read_fd)],
        pass_fds=(read_fd,),
        start_new_session=True,
        stdin=subprocess.DEVNULL,
    )
    os.close(read_fd)
    os.set_inheritable(write_fd, False)  # no child of the driver may keep the pipe open after it dies
    return Reaper(proc, write_fd)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--pid", type=int, required=True)
    parser.add_argument("--fd", type=int, required=True)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="specsweep reaper: %(message)s")
    watch(args.pid, args.fd)
    return 0


if __name__ == "__main__":
    sys.exit(main())
