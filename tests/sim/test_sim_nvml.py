"""The fake NVML: live processes' memory counts, dead (or zombie) ones' does not."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from orchestrator.gpu import visible_indices, wait_clean
from orchestrator.sim.nvml import FakeNvml, GpuStateWriter
from orchestrator.sim.profile import load_profile

REPO = Path(__file__).resolve().parents[2]


def node_dir(tmp_path: Path) -> Path:
    """A node's state folder with no sibling: a node also counts the orphans of the folders beside its own,
    and beside `tmp_path` lie the other tests' folders, where this process (whose starter, the shell that
    ran pytest, may be gone: `(pytest &)`) left files of its own."""
    return tmp_path / "node"


def test_live_process_memory_shows_on_its_gpus(tmp_path: Path) -> None:
    nvml = FakeNvml(node_dir(tmp_path), gpu_count=4, total_mib=1000, baseline_mib=10)
    writer = GpuStateWriter(node_dir(tmp_path), [1, 2])
    writer.update(300)
    used = {s.index: s.used_mib for s in nvml.snapshot()}
    assert used == {0: 10, 1: 310, 2: 310, 3: 10}
    procs = nvml.snapshot()[1].processes
    assert [(p.pid, p.used_mib) for p in procs] == [(os.getpid(), 300)]
    writer.remove()
    assert all(s.used_mib == 10 and not s.processes for s in nvml.snapshot())


def test_several_processes_add_up(tmp_path: Path) -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        GpuStateWriter(node_dir(tmp_path), [0]).update(100)
        GpuStateWriter(node_dir(tmp_path), [0], pid=child.pid).update(50)
        (sample,) = FakeNvml(node_dir(tmp_path), 1, 1000).snapshot()
        assert sample.used_mib == 150 and len(sample.processes) == 2
        child.send_signal(signal.SIGKILL)  # not reaped yet: a zombie holds no GPU memory
        child_gone = False
        for _ in range(100):
            (sample,) = FakeNvml(node_dir(tmp_path), 1, 1000).snapshot()
            if sample.used_mib == 100:
                child_gone = True
                break
        assert child_gone
    finally:
        child.kill()
        child.wait()
        GpuStateWriter(node_dir(tmp_path), [0]).remove()


def test_dead_process_file_is_ignored_and_cleaned(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    dead_pid = int(done.stdout)
    GpuStateWriter(node_dir(tmp_path), [0], pid=dead_pid).update(500)
    (sample,) = FakeNvml(node_dir(tmp_path), 1, 1000).snapshot()
    assert sample.used_mib == 0 and not sample.processes
    assert not list(node_dir(tmp_path).glob("gpu-*.json"))


def test_profile_sized_probe_and_visible_devices(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    nvml = FakeNvml.for_profile(node_dir(tmp_path), load_profile("kimi-k25-rtxpro6000").model_dump())
    samples = nvml.snapshot()
    assert len(samples) == 8 and samples[0].total_mib == 97887 and samples[0].used_mib == 600
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    assert visible_indices(8) == [2, 3]
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert visible_indices(2) == [0, 1]


# Starts a simulated server with a plain Popen (no parent-death signal: an older launcher, or one that
# failed to ask), says its pid, and waits to be killed.
PLAIN_LAUNCHER = (
    "import subprocess, sys, time\n"
    "p = subprocess.Popen(sys.argv[1:])\n"
    "print(p.pid, flush=True)\n"
    "time.sleep(300)\n"
)


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _pids(nvml: FakeNvml) -> set[int]:
    return {p.pid for s in nvml.snapshot() for p in s.processes}


def test_a_server_whose_starter_died_holds_every_simulated_node_of_the_machine(tmp_path: Path) -> None:
    """Two simulated nodes on one machine do not see each other's running trials; but a server whose
    starter is gone belongs to no trial any more, and holds the GPUs for whichever node runs next, as a
    stale SGLang holds a real node's: the clean check must see it."""
    root = tmp_path / "specsweep-sim"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server_argv = [
        sys.executable, "-m", "orchestrator.sim.server", "--model-path", "/models/tiny",
        "--host", "127.0.0.1", "--port", str(port), "--sim-profile", "h200-tiny",
        "--sim-state-dir", str(root / "node-a"), "--sim-startup-time-scale", "0",
    ]  # fmt: skip
    launcher = subprocess.Popen(
        [sys.executable, "-c", PLAIN_LAUNCHER, *server_argv], cwd=REPO, stdout=subprocess.PIPE, text=True
    )
    assert launcher.stdout is not None
    pid = int(launcher.stdout.readline())
    node_a = FakeNvml(root / "node-a", gpu_count=8, total_mib=143_771)
    node_b = FakeNvml(root / "node-b", gpu_count=8, total_mib=143_771)
    try:
        deadline = time.monotonic() + 60
        while pid not in _pids(node_a):
            assert time.monotonic() < deadline, "the server never held its GPUs"
            time.sleep(0.05)
        assert pid not in _pids(node_b)  # its starter runs it: node a's trial, not b's business
        launcher.kill()
        launcher.wait()
        assert not _gone(pid)
        assert pid in _pids(node_b) and pid in _pids(node_a)
        check = wait_clean(node_b, threshold_mib=1024, timeout_s=0.3, interval_s=0.1)
        assert not check.clean and f"pid {pid}" in check.describe()
    finally:
        launcher.kill()
        if not _gone(pid):
            os.kill(pid, signal.SIGKILL)
