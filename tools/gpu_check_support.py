"""NVML readings, process checks and the sweep CLI, for `gpu_check.py` (which runs the checks).

Runs on the GPU machine with the orchestrator's dependencies importable; standard library, psutil,
PyYAML and nvidia-ml-py beside them.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import yaml

ROOT = Path(__file__).resolve().parent.parent
NVLS_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
MIB = 1024 * 1024
CLEAN_MIB = 1024.0  # NVML counts about 615 MiB of driver reserve on an idle H200


# --- NVML and processes -----------------------------------------------------------------------


def nvml_snapshot() -> list[dict[str, Any]]:
    import pynvml

    pynvml.nvmlInit()
    gpus = []
    for i in range(pynvml.nvmlDeviceGetCount()):
        h = pynvml.nvmlDeviceGetHandleByIndex(i)
        mem = pynvml.nvmlDeviceGetMemoryInfo(h)
        procs = [
            (int(p.pid), (p.usedGpuMemory or 0) / MIB) for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h)
        ]
        gpus.append({"index": i, "used_mib": mem.used / MIB, "procs": procs})
    return gpus


def smi_used_mib() -> list[int]:
    out = subprocess.run(
        ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [int(x) for x in out.split()]


def sglang_processes() -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter(["pid", "name", "cmdline"]):
        cmd = " ".join(p.info.get("cmdline") or [])
        if "sglang::" in cmd or "sglang::" in (p.info.get("name") or "") or "sglang.launch_server" in cmd:
            found.append(p)
    return found


def wait_clean(timeout_s: float) -> tuple[bool, float, str]:
    """No compute process and no more than the driver's reserve on every GPU, no sglang process."""
    t0 = time.monotonic()
    while True:
        gpus = nvml_snapshot()
        procs = sglang_processes()
        dirty = [g for g in gpus if g["procs"] or g["used_mib"] > CLEAN_MIB]
        if not dirty and not procs:
            return (
                True,
                time.monotonic() - t0,
                ", ".join(f"GPU {g['index']} {g['used_mib']:.0f} MiB" for g in gpus),
            )
        if time.monotonic() - t0 > timeout_s:
            what = "; ".join(f"GPU {g['index']}: {g['used_mib']:.0f} MiB, pids {g['procs']}" for g in dirty)
            return False, time.monotonic() - t0, f"{what}; sglang processes {[p.pid for p in procs]}"
        time.sleep(0.5)


def port_of(pid: int) -> int | None:
    """The `--port` of the SGLang launcher above (or at) `pid`: ties a GPU process to its trial."""
    with contextlib.suppress(psutil.Error):
        proc: psutil.Process | None = psutil.Process(pid)
        while proc is not None:
            cmd = proc.cmdline()
            if "--port" in cmd:
                return int(cmd[cmd.index("--port") + 1])
            proc = proc.parent()
    return None


def environ_of(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    pairs = (item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
    return {k.decode(errors="replace"): v.decode(errors="replace") for k, v in pairs}


class GpuWatch:
    """Polls NVML in the background: which server (by port) held which GPU, and their environments."""

    def __init__(self, on_sample: Callable[[list[dict[str, Any]]], None] | None = None) -> None:
        self.seen: dict[int, set[int]] = {}  # port -> GPU indices its processes were seen on
        self.env_ok: dict[int, bool] = {}  # pid -> NVLS variables present in its environment
        self.peak_mib: dict[int, float] = {}
        self.on_sample = on_sample
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> GpuWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                gpus = nvml_snapshot()
                for g in gpus:
                    self.peak_mib[g["index"]] = max(self.peak_mib.get(g["index"], 0.0), g["used_mib"])
                    for pid, _ in g["procs"]:
                        port = port_of(pid)
                        if port is not None:
                            self.seen.setdefault(port, set()).add(g["index"])
                        if pid not in self.env_ok:
                            env = environ_of(pid)
                            if env:
                                self.env_ok[pid] = all(env.get(k) == v for k, v in NVLS_OFF.items())
                if self.on_sample is not None:
                    self.on_sample(gpus)
            except Exception as err:  # a process that vanished between two NVML calls
                print(f"  (watch: {err})", flush=True)
            self._stop.wait(0.5)


# --- the sweep driver -------------------------------------------------------------------------


def write_spec(path: Path, name: str, gpus: int, known_good: list[tuple[Any, ...]], trials: int) -> Path:
    base = yaml.safe_load((ROOT / "trials" / "h200.yaml").read_text())
    models = ROOT / "trials" / "models"
    base.update(name=name)
    base["node"] = {"gpus": gpus, "clean_threshold_mib": CLEAN_MIB}
    base["model"].update(path=str(models / "tiny-llama"), draft_path=str(models / "tiny-llama-eagle3"))
    # Prefill CUDA graphs are compiled by Triton for ~60 token counts on a fresh machine (about 70 s
    # per start-up shape); the sweep's own levers do not touch them, so the check leaves them off.
    base["server"]["flags"] = [*base["server"]["flags"], "--cuda-graph-backend-prefill", "disabled"]
    base["server"]["env"] = {**base["server"].get("env", {}), **NVLS_OFF}
    keys = (
        "mem_fraction_static",
        "cuda_graph_max_bs",
        "max_running_requests",
        "speculative_num_steps",
        "speculative_eagle_topk",
        "speculative_num_draft_tokens",
    )
    # 0.0001 leaves no KV pool up to tp 8: the tiny weights take 0.0011 of an H200 at tp 1, 0.00014 at tp 8.
    base["search"]["mem_fraction_static"] = {"choices": [0.0001, 0.5, 0.75, 0.8, 0.85, 0.9]}
    base["known_good"] = [dict(zip(keys, k, strict=True)) for k in known_good]
    base["budget"] = {"trials": trials, "baseline": False}
    base["timeouts"] = {
        "startup_s": 300,
        "benchmark_s": 120,
        "gpu_clean_s": 30,
        "stop_s": 15,
        "hang_after_error_s": 20,
    }
    path.write_text(yaml.safe_dump(base, sort_keys=False))
    return path


def driver_cmd(spec: Path, out: Path, study: str, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "orchestrator.sweep",
        str(spec),
        "--out",
        str(out),
        "--study",
        study,
        "--no-dashboard",
        *extra,
    ]


def start_driver(cmd: list[str], log: Path) -> subprocess.Popen[bytes]:
    """In its own session with SIGINT at its default: a background job of a non-interactive shell
    ignores SIGINT, and so would a driver started from it."""
    with log.open("ab") as f:
        return subprocess.Popen(
            cmd,
            cwd=ROOT,
            stdout=f,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )


def stop_group(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def results(out: Path, study: str) -> list[dict[str, Any]]:
    """Every trial record the sweep wrote (MLflow artifacts), with its trial number."""
    found = []
    for path in (out / "mlartifacts" / study).glob("**/result.json"):
        r = json.loads(path.read_text())
        m = re.search(r"trials/(\d+)/", r.get("log_path", ""))
        r["number"] = int(m.group(1)) if m else -1
        found.append(r)
    return sorted(found, key=lambda r: (r["number"], r.get("started_unix", 0)))


def study_trials(out: Path, study: str) -> list[Any]:
    import optuna

    return optuna.load_study(study_name=study, storage=f"sqlite:///{out / 'optuna.db'}").trials


def label(r: dict[str, Any]) -> str:
    c = r["config"]
    return (
        f"mf{c['mem_fraction_static']:.3f} gbs{c['cuda_graph_max_bs']} mrr{c['max_running_requests']} "
        f"s{c['speculative_num_steps']}k{c['speculative_eagle_topk']}d{c['speculative_num_draft_tokens']}"
    )


def describe(rs: list[dict[str, Any]]) -> str:
    parts = []
    for r in rs:
        s = f"#{r['number']} {label(r)} {r['status']}"
        if r.get("failure") and r["status"] != "ok":
            s += f" ({r['failure']['stage']}/{r['failure']['kind']})"
        if r.get("startup_s"):
            s += f" start-up {r['startup_s']:.0f}s"
        best = max((st["output_tok_per_s"] for st in r.get("stages", [])), default=None)
        if best:
            s += f" {best:.0f} tok/s"
        parts.append(s)
    return "; ".join(parts)


def wait_for(cond: Callable[[], bool], timeout_s: float, proc: subprocess.Popen[bytes] | None = None) -> bool:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        if cond():
            return True
        if proc is not None and proc.poll() is not None:
            return cond()
        time.sleep(0.5)
    return False


def server_log_has(out: Path, study: str, number: int, text: str) -> bool:
    path = out / study / "trials" / f"{number:04d}" / "server.log"
    try:
        return text in path.read_text(errors="replace")
    except OSError:
        return False
