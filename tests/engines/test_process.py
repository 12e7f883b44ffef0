"""The server's whole tree is stopped, by pid, including children that outlive their parent."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from orchestrator.engines.launch import LaunchPlan
from orchestrator.engines.process import LogFollower, ServerProcess
from orchestrator.sim.nvml import FakeNvml

ROOT = Path(__file__).resolve().parents[2]

# A parent that starts a child which ignores SIGINT, then waits: like SGLang's launcher and scheduler.
TREE = (
    "import subprocess, sys, time, signal\n"
    "c = subprocess.Popen([sys.executable, '-c', 'import signal, time; "
    'signal.signal(signal.SIGINT, signal.SIG_IGN); print("child", "ready", flush=True); time.sleep(60)\'])\n'
    "print('parent up', flush=True)\n"
    "time.sleep(60)\n"
)


def _wait_for(path: Path, text: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and text in path.read_text():
            return
        time.sleep(0.05)
    raise AssertionError(f"{text!r} never appeared in {path}")


def test_stop_kills_the_whole_tree(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    proc = ServerProcess(LaunchPlan(argv=(sys.executable, "-c", TREE), host="127.0.0.1", port=0), log)
    proc.start()
    _wait_for(log, "child ready")
    proc.refresh_tree()
    pids = [p.pid for p in proc.alive_tree()]
    assert len(pids) == 2
    report = proc.stop(grace_s=2.0)
    assert report.signal_used == "SIGKILL"  # the child ignored SIGINT
    assert all(not psutil.pid_exists(pid) or psutil.Process(pid).status() == "zombie" for pid in pids)
    assert log.read_text().startswith("$ ")


@pytest.mark.slow  # seconds of real time (a simulated server, a sweep or a wait); left out of `make unit`
def test_orphaned_child_is_still_ours(tmp_path: Path) -> None:
    """SGLang's launcher SIGKILLs itself on failure; its children must still be found and stopped."""
    log = tmp_path / "server.log"
    code = TREE.replace(
        "time.sleep(60)\n", "time.sleep(0.5)\nimport os, signal; os.kill(os.getpid(), 9)\n", 1
    )
    proc = ServerProcess(LaunchPlan(argv=(sys.executable, "-c", code), host="127.0.0.1", port=0), log)
    proc.start()
    _wait_for(log, "child ready")
    proc.refresh_tree()
    time.sleep(1.0)
    assert proc.poll() == -9
    alive = proc.alive_tree()
    assert len(alive) == 1  # the orphan
    proc.stop(grace_s=1.0)
    assert not proc.alive_tree()


def test_follower_reads_only_complete_lines(tmp_path: Path) -> None:
    path = tmp_path / "log"
    f = LogFollower(path)
    assert f.new_lines() == []
    path.write_bytes(b"a\nb")
    assert f.new_lines() == ["a"]
    with path.open("ab") as out:
        out.write(b"c\nprogress 1\rprogress 2\n")
    assert f.new_lines() == ["bc", "progress 1", "progress 2"]


@pytest.mark.slow  # waits out the stop's grace period
def test_server_sees_sigint_even_when_its_parent_blocks_it(tmp_path: Path) -> None:
    """Ray workers run tasks with SIGINT blocked; the server must still stop cleanly on SIGINT."""
    import signal
    import threading

    log = tmp_path / "server.log"
    code = "import time; print('up', 'now', flush=True); time.sleep(60)"
    proc = ServerProcess(LaunchPlan(argv=(sys.executable, "-c", code), host="127.0.0.1", port=0), log)
    result: dict[str, object] = {}

    def start_blocked() -> None:  # as a Ray worker thread does
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        proc.start()
        result["started"] = True

    t = threading.Thread(target=start_blocked)
    t.start()
    t.join()
    _wait_for(log, "up now")
    report = proc.stop(grace_s=5.0)
    assert report.signal_used == "SIGINT", report
    assert report.returncode not in (None, -9)


# Three generations, like SGLang's launcher -> scheduler -> detokenizer / TP workers: the grandchild
# ignores SIGINT and must be found through its parent, not only as a direct child of the server.
GENERATIONS = (
    "import subprocess, sys, time\n"
    "grand = 'import signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN); "
    'print("grandchild", "ready", flush=True); time.sleep(60)\'\n'
    "child = 'import subprocess, sys, time, signal; signal.signal(signal.SIGINT, signal.SIG_IGN); "
    "subprocess.Popen([sys.executable, \"-c\", ' + repr(grand) + ']); time.sleep(60)'\n"
    "subprocess.Popen([sys.executable, '-c', child])\n"
    "print('parent up', flush=True)\n"
    "time.sleep(60)\n"
)


def test_stop_kills_grandchildren_too(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    proc = ServerProcess(LaunchPlan(argv=(sys.executable, "-c", GENERATIONS), host="127.0.0.1", port=0), log)
    proc.start()
    _wait_for(log, "grandchild ready")
    proc.refresh_tree()
    pids = [p.pid for p in proc.alive_tree()]
    assert len(pids) == 3, pids
    proc.stop(grace_s=1.0)
    assert all(not psutil.pid_exists(pid) or psutil.Process(pid).status() == "zombie" for pid in pids)
    assert not proc.alive_tree()


def test_server_env_adds_to_the_trial_environment_and_drops_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """NVLink multicast must stay off in every server: the variables set where the trial runs reach the
    server even when the spec's `server.env` sets others."""
    nvls = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
    for key, value in nvls.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("SPECSWEEP_TEST_OVERRIDDEN", "from-the-worker")
    keys = [*nvls, "HF_HUB_OFFLINE", "SPECSWEEP_TEST_OVERRIDDEN"]
    code = f"import os; print('env', [os.environ.get(k) for k in {keys!r}], flush=True)"
    plan = LaunchPlan(
        argv=(sys.executable, "-c", code),
        host="127.0.0.1",
        port=0,
        env=(("HF_HUB_OFFLINE", "1"), ("SPECSWEEP_TEST_OVERRIDDEN", "from-the-spec")),
    )
    log = tmp_path / "server.log"
    proc = ServerProcess(plan, log)
    proc.start()
    _wait_for(log, "env [")
    proc.stop(grace_s=2.0)
    assert "env ['0', '1', '1', '1', 'from-the-spec']" in log.read_text()


# A launcher that starts one server through `ServerProcess`, says its pid, and waits to be killed: a trial
# worker (or a driver running trials itself) that dies with SIGKILL.
LAUNCHER = (
    "import sys, time\n"
    "from pathlib import Path\n"
    "from orchestrator.engines.launch import LaunchPlan\n"
    "from orchestrator.engines.process import ServerProcess\n"
    "p = ServerProcess(LaunchPlan(argv=tuple(sys.argv[2:]), host='127.0.0.1', port=0), Path(sys.argv[1]))\n"
    "p.start()\n"
    "print(p.pid, flush=True)\n"
    "time.sleep(300)\n"
)


def _sim_server_argv(state: Path) -> list[str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return [
        sys.executable, "-m", "orchestrator.sim.server", "--model-path", "/models/tiny",
        "--host", "127.0.0.1", "--port", str(port), "--sim-profile", "h200-tiny",
        "--sim-state-dir", str(state), "--sim-startup-time-scale", "0",
    ]  # fmt: skip


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_the_server_dies_with_the_process_that_started_it(tmp_path: Path) -> None:
    """kill -9 of whatever started the server (the trial's worker, the driver) must not leave it listening
    and holding the GPUs: the kernel's parent-death signal ends it."""
    state = tmp_path / "gpus"
    launcher = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER, str(tmp_path / "server.log"), *_sim_server_argv(state)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert launcher.stdout is not None
    server_pid = int(launcher.stdout.readline())
    try:
        nvml = FakeNvml(state, gpu_count=8, total_mib=143_771)
        _until(lambda: any(p.pid == server_pid for s in nvml.snapshot() for p in s.processes), 60)
        launcher.kill()
        launcher.wait()
        _until(lambda: _gone(server_pid), 20)
        assert not any(s.processes for s in nvml.snapshot())
    finally:
        launcher.kill()
        if not _gone(server_pid):
            os.kill(server_pid, signal.SIGKILL)


def test_stop_reaches_a_child_that_left_the_tree_before_it_was_seen(tmp_path: Path) -> None:
    """The server leads its own process group: a child re-parented away before any refresh of the tree
    (SGLang's launcher dies at once) is still stopped with the group."""
    log = tmp_path / "server.log"
    code = (
        "import os, subprocess, sys\n"
        "c = subprocess.Popen([sys.executable, '-c', 'import time; print(\"up\", 2 * 3, flush=True); "
        "time.sleep(120)'])\n"
        "print('child', c.pid, 'started', flush=True)\n"
        "os._exit(0)\n"
    )
    proc = ServerProcess(LaunchPlan(argv=(sys.executable, "-c", code), host="127.0.0.1", port=0), log)
    proc.start()
    _wait_for(log, "up 6")
    child = int(next(line for line in log.read_text().splitlines() if line.endswith(" started")).split()[1])
    try:
        assert os.getpgid(child) == proc.pid  # its own group, not the trial worker's
        report = proc.stop(grace_s=1.0)
        assert child in report.killed
        _until(lambda: _gone(child), 10)
    finally:
        if not _gone(child):
            os.kill(child, signal.SIGKILL)


def _until(predicate: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("timed out")
        time.sleep(0.05)


def test_server_sees_sigint_even_when_its_driver_ignores_it(tmp_path: Path) -> None:
    """A driver started in the background by a shell, or under nohup, runs with SIGINT ignored, and an
    ignored signal stays ignored through exec: the server would never see the SIGINT that stops it cleanly
    and every stop would wait out its grace period, then SIGKILL."""
    import signal

    log = tmp_path / "server.log"
    code = "import time; print('up', 'now', flush=True); time.sleep(60)"
    proc = ServerProcess(LaunchPlan(argv=(sys.executable, "-c", code), host="127.0.0.1", port=0), log)
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        proc.start()
    finally:
        signal.signal(signal.SIGINT, previous)
    _wait_for(log, "up now")
    report = proc.stop(grace_s=5.0)
    assert report.signal_used == "SIGINT", report
    assert report.stop_s < 5.0
