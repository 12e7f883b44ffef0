"""GPU hygiene through NVML: is every GPU of the node clean before a trial, and again after it?

`nvidia-ml-py` (module `pynvml`) is imported lazily so the package imports on a laptop; the simulated
node's fake NVML implements the same `GpuProbe` protocol.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from orchestrator.records import GpuProcess, GpuSample

log = logging.getLogger(__name__)
MIB = 1024 * 1024


class GpuProbe(Protocol):
    def snapshot(self) -> tuple[GpuSample, ...]: ...


def visible_indices(count: int) -> list[int]:
    """The physical indices this worker may use: Ray sets CUDA_VISIBLE_DEVICES for a task with GPUs."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES", "").strip()
    if env:
        return [int(x) for x in env.split(",") if x.strip().isdigit()]
    return list(range(count))


class NvmlProbe:
    """The real thing. `used` includes the driver's own reserve (about 615 MiB on an H200)."""

    def __init__(self, indices: Sequence[int] | None = None) -> None:
        try:
            import pynvml
        except ImportError as err:  # pragma: no cover - nvidia-ml-py is a core dependency
            raise RuntimeError("nvidia-ml-py is not installed: pip install nvidia-ml-py") from err
        self._nvml: Any = pynvml
        pynvml.nvmlInit()
        self._indices = list(indices) if indices is not None else visible_indices(pynvml.nvmlDeviceGetCount())

    def snapshot(self) -> tuple[GpuSample, ...]:
        nvml = self._nvml
        samples = []
        for index in self._indices:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            mem = nvml.nvmlDeviceGetMemoryInfo(handle)
            procs = []
            for p in nvml.nvmlDeviceGetComputeRunningProcesses(handle):
                used = (p.usedGpuMemory or 0) / MIB
                procs.append(GpuProcess(pid=int(p.pid), used_mib=used, name=_process_name(int(p.pid))))
            uuid = _uuid(nvml, handle)
            samples.append(GpuSample(index, mem.total / MIB, mem.used / MIB, tuple(procs), uuid))
        return tuple(samples)


def _uuid(nvml: Any, handle: Any) -> str:
    """The GPU's UUID (older bindings return bytes)."""
    raw = nvml.nvmlDeviceGetUUID(handle)
    return raw.decode() if isinstance(raw, bytes) else str(raw)


def _process_name(pid: int) -> str:
    try:
        import psutil

        return " ".join(psutil.Process(pid).cmdline()[:4])
    except Exception:  # the process may be in another container or gone already
        return ""


@dataclass(frozen=True)
class CleanCheck:
    clean: bool
    waited_s: float
    samples: tuple[GpuSample, ...]
    holders: tuple[GpuProcess, ...]

    def describe(self) -> str:
        dirty = [s for s in self.samples if s.processes or s.used_mib > 0]
        gpus = ", ".join(f"GPU {s.index}: {s.used_mib:.0f} MiB used" for s in dirty)
        who = ", ".join(f"pid {p.pid} ({p.name or '?'}, {p.used_mib:.0f} MiB)" for p in self.holders)
        return f"{gpus}; held by {who or 'no listed process'}"


def is_clean(samples: Sequence[GpuSample], threshold_mib: float, baseline_mib: float = 0.0) -> bool:
    return all(not s.processes and s.used_mib - baseline_mib <= threshold_mib for s in samples)


def wait_clean(
    probe: GpuProbe,
    threshold_mib: float,
    timeout_s: float,
    *,
    baseline_mib: float = 0.0,
    interval_s: float = 0.2,
    clock: Callable[[], float] = time.monotonic,
) -> CleanCheck:
    """Poll until every GPU is clean, or give up after `timeout_s` naming who holds the memory."""
    t0 = clock()
    while True:
        samples = probe.snapshot()
        if is_clean(samples, threshold_mib, baseline_mib):
            return CleanCheck(True, clock() - t0, samples, ())
        if clock() - t0 >= timeout_s:
            holders = tuple(p for s in samples for p in s.processes)
            return CleanCheck(False, clock() - t0, samples, holders)
        time.sleep(interval_s)
