"""The fake NVML: live processes' memory counts, dead (or zombie) ones' does not."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.node.gpu import visible_indices
from orchestrator.sim.nvml import FakeNvml, GpuStateWriter
from orchestrator.sim.profile import load_profile


def test_live_process_memory_shows_on_its_gpus(tmp_path: Path) -> None:
    nvml = FakeNvml(tmp_path, gpu_count=4, total_mib=1000, baseline_mib=10)
    writer = GpuStateWriter(tmp_path, [1, 2])
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
        GpuStateWriter(tmp_path, [0]).update(100)
        GpuStateWriter(tmp_path, [0], pid=child.pid).update(50)
        (sample,) = FakeNvml(tmp_path, 1, 1000).snapshot()
        assert sample.used_mib == 150 and len(sample.processes) == 2
        child.send_signal(signal.SIGKILL)  # not reaped yet: a zombie holds no GPU memory
        child_gone = False
        for _ in range(100):
            (sample,) = FakeNvml(tmp_path, 1, 1000).snapshot()
            if sample.used_mib == 100:
                child_gone = True
                break
        assert child_gone
    finally:
        child.kill()
        child.wait()
        GpuStateWriter(tmp_path, [0]).remove()


def test_dead_process_file_is_ignored_and_cleaned(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    dead_pid = int(done.stdout)
    GpuStateWriter(tmp_path, [0], pid=dead_pid).update(500)
    (sample,) = FakeNvml(tmp_path, 1, 1000).snapshot()
    assert sample.used_mib == 0 and not sample.processes
    assert not list(tmp_path.glob("gpu-*.json"))


def test_profile_sized_probe_and_visible_devices(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    nvml = FakeNvml.for_profile(tmp_path, load_profile("kimi-k25-rtxpro6000").model_dump())
    samples = nvml.snapshot()
    assert len(samples) == 8 and samples[0].total_mib == 97887 and samples[0].used_mib == 600
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    assert visible_indices(8) == [2, 3]
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert visible_indices(2) == [0, 1]
