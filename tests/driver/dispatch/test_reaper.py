"""A driver killed with SIGKILL leaves nothing it started running; one that ends its run itself leaves its
process tree alone (in a test process, that tree is the test runner's)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil

from orchestrator.driver.dispatch.reaper import Started

# A stand-in for the driver: it starts the watcher, then what Ray would (a child and a grandchild), prints
# their pids and, told to, ends its run itself.
DRIVER = textwrap.dedent(
    """
    import subprocess, sys, time
    from orchestrator.driver.dispatch.reaper import start_reaper
    reaper = start_reaper()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    shell = subprocess.Popen(["sh", "-c", "sleep 120 & echo $!; wait"], stdout=subprocess.PIPE, text=True)
    grandchild = int(shell.stdout.readline())
    print(child.pid, shell.pid, grandchild, reaper.proc.pid, flush=True)
    if sys.argv[1] == "release":
        time.sleep(1.5)
        reaper.release()
        sys.exit(0)
    time.sleep(120)
    """
)


def _start(mode: str) -> tuple[subprocess.Popen[str], list[int], int]:
    driver = subprocess.Popen(
        [sys.executable, "-c", DRIVER, mode], stdout=subprocess.PIPE, text=True, cwd=os.getcwd()
    )
    assert driver.stdout is not None
    *started, watcher = (int(p) for p in driver.stdout.readline().split())
    return driver, started, watcher


def _alive(pids: list[int]) -> list[int]:
    return [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]


def _wait_gone(pids: list[int], timeout_s: float) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while _alive(pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    return _alive(pids)


def test_a_driver_killed_with_sigkill_leaves_nothing_it_started() -> None:
    driver, started, watcher = _start("kill")
    try:
        time.sleep(1.5)  # the watcher's snapshots have seen them
        assert _alive(started) == started
        driver.kill()  # SIGKILL: no exit hook runs
        driver.wait()
        assert _wait_gone(started, 10) == []
        assert _wait_gone([watcher], 5) == []  # and the watcher is gone too
    finally:
        for pid in _alive(started):
            os.kill(pid, signal.SIGKILL)


def test_a_driver_that_ends_its_run_itself_leaves_its_process_tree_alone() -> None:
    driver, started, watcher = _start("release")
    try:
        assert driver.wait(timeout=20) == 0
        assert _wait_gone([watcher], 5) == []
        time.sleep(1.0)
        # Its children outlive it (they are reparented, not signalled): Ray's exit hook stops Ray's, and a
        # test process's other children are none of the watcher's business.
        assert _alive(started) == started
    finally:
        for pid in _alive(started):
            os.kill(pid, signal.SIGKILL)


def test_a_reused_pid_is_not_the_process_seen() -> None:
    me = psutil.Process()
    assert Started(me.pid, me.create_time()).alive() is not None
    assert Started(me.pid, me.create_time() - 10).alive() is None
