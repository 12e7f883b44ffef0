"""A fake NVML for simulated nodes: GPU memory lives in small JSON files, one per server process.

The simulated server writes ``gpu-<pid>.json`` (atomically: temporary file, then rename) at each step
of its start-up, and removes it on a clean exit. ``FakeNvml`` sums the files of live processes, the
way the driver frees a dead process's memory on its own: a file left behind by a process that was
SIGKILLed (or is a zombie) counts for nothing. Several servers may share a state folder.

The simulated nodes of one machine keep their folders side by side (one per node). A node counts the
servers of its own folder, and also every live server in a sibling folder whose starter (the process
that launched it, recorded in its file) is gone: such a server belongs to no trial any more, it holds
the machine's GPUs as a stale SGLang holds a real node's, and whichever node the next driver's trial
lands on must see it, so that its clean check waits and fails as it would on real GPUs.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
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
        self._starter = _starter_of(self.pid)

    def update(self, used_mib: float) -> None:
        """Every GPU of the process holds the same amount (the TP ranks are alike)."""
        payload = {
            "pid": self.pid,
            "create_time": self._create_time,
            "starter_pid": self._starter[0],
            "starter_create_time": self._starter[1],
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


def _starter_of(pid: int) -> tuple[int, float]:
    """The parent that launched `pid`, with its create time; (0, 0.0) when it is gone already (the
    server was re-parented before it wrote its first file): the server is an orphan from the start."""
    try:
        parent = psutil.Process(pid).parent()
        if parent is None or parent.pid == 1:
            return 0, 0.0
        return parent.pid, parent.create_time()
    except psutil.Error:
        return 0, 0.0


def _alive(pid: int, create_time: float) -> bool:
    """Alive as the driver sees it: running (not a zombie) and not a recycled pid."""
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        return not create_time or abs(proc.create_time() - create_time) < 1.0
    except psutil.Error:
        return False


def _orphan(entry: Mapping[str, Any]) -> bool:
    """Whether the process that launched this server is gone. A file that names no starter at all comes
    from a server of an older version, which only its own node counted: it stays that way."""
    if "starter_pid" not in entry:
        return False
    try:
        starter = int(entry.get("starter_pid", 0))
        created = float(entry.get("starter_create_time", 0.0))
    except (TypeError, ValueError):
        return True
    return starter <= 0 or not _alive(starter, created)


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

    def _entries(self, folder: Path, orphans_only: bool = False) -> list[dict[str, Any]]:
        entries = []
        for path in sorted(folder.glob("gpu-*.json")):
            try:
                data = json.loads(path.read_text())
                pid = int(data["pid"])
            except (OSError, ValueError, KeyError, TypeError):
                continue  # vanished or half-written by someone else: the next snapshot sees it
            if _alive(pid, float(data.get("create_time", 0.0))):
                if not orphans_only or _orphan(data):
                    entries.append(data)
            else:
                with contextlib.suppress(OSError):
                    path.unlink()  # the process is gone, so is its memory
        return entries

    def _all_entries(self) -> list[dict[str, Any]]:
        """This node's servers, and the orphaned servers of its sibling nodes on this machine."""
        entries = self._entries(self.state_dir) if self.state_dir.is_dir() else []
        try:
            siblings = sorted(p for p in self.state_dir.parent.iterdir() if p != self.state_dir)
        except OSError:
            siblings = []
        for folder in siblings:
            if folder.is_dir():
                entries.extend(self._entries(folder, orphans_only=True))
        return entries

    @staticmethod
    def _uuid(index: int) -> str:
        """A simulated GPU's UUID: the host's, so that the simulated node is one machine whichever Ray
        node (a new id at every Ray start) runs it, as a real node's GPUs keep their UUIDs."""
        return f"GPU-sim-{socket.gethostname()}-{index}"

    def snapshot(self) -> tuple[GpuSample, ...]:
        entries = self._all_entries()
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
            used_mib = min(used_total, self.total_mib)
            samples.append(GpuSample(index, self.total_mib, used_mib, tuple(procs), self._uuid(index)))
        return tuple(samples)
