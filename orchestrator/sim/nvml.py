"""A fake NVML for simulated nodes: GPU memory lives in small JSON files, one per server process.

The simulated server writes ``gpu-<pid>.json`` (atomically: temporary file, then rename) at each step
of its start-up, and removes it on a clean exit. ``FakeNvml`` sums the files of live processes, the
way the driver frees a dead process's memory on its own: a file left behind by a process that was
SIGKILLed (or is a zombie) counts for nothing. Several servers may share a state folder.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import psutil

from orchestrator.records import GpuProcess, GpuSample
from orchestrator.sim.profile import SimProfile

PROCESS_NAME = "sglang::scheduler"


class GpuStateWriter:
    """The server's side: what this process holds on each of its GPUs."""

    def __init__(self, state_dir: Path, indices: Sequence[int], pid: int | None = None) -> None:
        self.state_dir = Path(state_dir)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.indices = list(indices)
        self.pid = pid if pid is not None else os.getpid()
        self.path = self.state_dir / f"gpu-{self.pid}.json"
        try:
            self._create_time = psutil.Process(self.pid).create_time()
        except psutil.Error:
            self._create_time = 0.0

    def update(self, used_mib: float) -> None:
        """Every GPU of the process holds the same amount (the TP ranks are alike)."""
        payload = {
            "pid": self.pid,
            "create_time": self._create_time,
            "name": PROCESS_NAME,
            "gpus": {str(i): round(used_mib, 1) for i in self.indices},
        }
        fd, tmp = tempfile.mkstemp(prefix=".gpu-", suffix=".tmp", dir=self.state_dir)
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(payload, f)
            os.replace(tmp, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    def remove(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()


def _alive(pid: int, create_time: float) -> bool:
    """Alive as the driver sees it: running (not a zombie) and not a recycled pid."""
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        return not create_time or abs(proc.create_time() - create_time) < 1.0
    except psutil.Error:
        return False


class FakeNvml:
    """The orchestrator's side: implements the ``GpuProbe`` protocol over the state folder."""

    def __init__(
        self,
        state_dir: Path,
        gpu_count: int,
        total_mib: float,
        baseline_mib: float = 0,
        indices: Sequence[int] | None = None,
    ) -> None:
        self.state_dir = Path(state_dir)
        self.gpu_count = gpu_count
        self.total_mib = total_mib
        self.baseline_mib = baseline_mib
        self.indices = list(indices) if indices is not None else list(range(gpu_count))

    @classmethod
    def for_profile(cls, state_dir: Path, profile: SimProfile | Mapping[str, Any]) -> FakeNvml:
        """The node a profile describes; NVML's ``used`` includes the driver reserve, as on real GPUs."""
        p = profile if isinstance(profile, SimProfile) else SimProfile.model_validate(dict(profile))
        return cls(state_dir, p.gpu_count, p.gpu_total_mib, p.driver_reserve_mib)

    def _entries(self) -> list[dict[str, Any]]:
        entries = []
        for path in sorted(self.state_dir.glob("gpu-*.json")):
            try:
                data = json.loads(path.read_text())
                pid = int(data["pid"])
            except (OSError, ValueError, KeyError, TypeError):
                continue  # vanished or half-written by someone else: the next snapshot sees it
            if _alive(pid, float(data.get("create_time", 0.0))):
                entries.append(data)
            else:
                with contextlib.suppress(OSError):
                    path.unlink()  # the process is gone, so is its memory
        return entries

    def snapshot(self) -> tuple[GpuSample, ...]:
        entries = self._entries() if self.state_dir.is_dir() else []
        samples = []
        for index in self.indices:
            procs = []
            for e in entries:
                used = e.get("gpus", {}).get(str(index))
                if used is not None:
                    procs.append(
                        GpuProcess(pid=int(e["pid"]), used_mib=float(used), name=str(e.get("name", "")))
                    )
            used_total = self.baseline_mib + sum(p.used_mib for p in procs)
            samples.append(GpuSample(index, self.total_mib, min(used_total, self.total_mib), tuple(procs)))
        return tuple(samples)
