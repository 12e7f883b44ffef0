#!/usr/bin/env python3
"""The checks behind `tools/gpu-check.sh`: prove specsweep on a GPU machine with real SGLang.

    python3 tools/gpu_check.py [--out DIR] [--only tp,nodes,final]

Run from the repository root after the environment is set up (gpu-check.sh does that: offline
bundles, NVLink multicast off, tiny model weights). Each check prints one `PASS name: figures` or
`FAIL name: why` line; the exit status is the number of failed checks (0: all passed).

- tp: a sweep at --tp-size = every GPU of the machine (node.gpus: N) on the embedded Ray: a KV
  start-up OOM, an ok trial, then Ctrl-C (SIGINT to the driver) while a third trial starts; the
  driver must exit promptly and leave no server or GPU memory behind; `--resume` then finishes the
  budget without relaunching a finished configuration.
- nodes (two GPUs or more): two Ray nodes on this host (`ray.cluster_utils.Cluster`, one GPU each
  through CUDA_VISIBLE_DEVICES per raylet), trials in parallel, each on its own GPU as NVML sees it;
  one trial's GPU-holding process is SIGKILLed mid-trial: that trial is a crash (not an OOM, not
  lost), its GPU is clean after, and the sweep goes on to its budget.
- final: every GPU at 0 MiB in nvidia-smi and no `sglang::` process.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpu_check_support import (
    CLEAN_MIB,
    NVLS_OFF,
    ROOT,
    GpuWatch,
    describe,
    driver_cmd,
    nvml_snapshot,
    port_of,
    results,
    server_log_has,
    sglang_processes,
    smi_used_mib,
    start_driver,
    stop_group,
    study_trials,
    wait_clean,
    wait_for,
    write_spec,
)


@dataclass
class Outcome:
    name: str
    ok: bool
    text: str


@dataclass
class Checker:
    out: Path
    gpus: int
    results: list[Outcome] = field(default_factory=list)

    def report(self, name: str, ok: bool, text: str) -> None:
        self.results.append(Outcome(name, ok, text))
        print(f"{'PASS' if ok else 'FAIL'} {name}: {text}", flush=True)


# --- the checks -------------------------------------------------------------------------------


def check_tp(c: Checker) -> None:
    """tp = all GPUs: KV OOM + ok, then Ctrl-C mid-trial and --resume."""
    n, study = c.gpus, f"tp{c.gpus}"
    out = c.out / study
    out.mkdir(parents=True, exist_ok=True)
    spec = write_spec(
        out / "spec.yaml",
        study,
        n,
        [(0.0001, 16, 16, 3, 1, 4), (0.85, 16, 16, 3, 1, 4), (0.8, 16, 16, 2, 1, 3)],
        trials=3,
    )
    log = out / "driver.log"
    t0 = time.monotonic()
    with GpuWatch() as watch:
        driver = start_driver(driver_cmd(spec, out, study, "-v"), log)
        try:
            # Interrupt the third trial once its server holds GPU memory (CUDA and NCCL are set up).
            started = wait_for(lambda: server_log_has(out, study, 2, "Load weight begin"), 420, driver)
            first_wall = time.monotonic() - t0
            if not started:
                c.report(
                    f"tp{n}-sweep", False, f"third trial never reached its weights; driver rc {driver.poll()}"
                )
                return
            t_int = time.monotonic()
            os.kill(driver.pid, signal.SIGINT)
            try:
                rc = driver.wait(timeout=60)
            except subprocess.TimeoutExpired:
                rc = None
            exit_s = time.monotonic() - t_int
        finally:
            stop_group(driver)
        clean, clean_s, gpus = wait_clean(30)
        ok = rc == 130 and exit_s < 30 and clean
        c.report(
            "ctrl-c",
            ok,
            f"driver rc {rc} {exit_s:.1f} s after SIGINT (mid-trial #2); no sglang process and GPUs clean "
            f"{clean_s:.1f} s later: {clean} ({gpus})",
        )
        before = {t.number: t for t in study_trials(out, study)}
        t1 = time.monotonic()
        resume = subprocess.run(
            driver_cmd(spec, out, study, "--resume"), cwd=ROOT, capture_output=True, text=True, timeout=480
        )
        resume_wall = time.monotonic() - t1
        (out / "resume.log").write_text(resume.stdout + resume.stderr)
    rs = results(out, study)
    trials = study_trials(out, study)
    counted = [
        t
        for t in trials
        if t.state.is_finished()
        and not t.user_attrs.get("closed")
        and t.user_attrs.get("status") not in ("predicted_oom", "lost")
    ]
    finished_before = {
        json.dumps(t.params, sort_keys=True)
        for t in before.values()
        if t.user_attrs.get("status") in ("ok", "oom")
    }
    launched = [
        json.dumps(t.params, sort_keys=True)
        for t in trials
        if t.user_attrs.get("status") in ("ok", "oom", "failed", "oom_under_load", "kv_pressure", "timeout")
    ]
    relaunched = [p for p in finished_before if launched.count(p) > 1]
    statuses = [r["status"] for r in rs]
    tp_ok = all(f"--tp-size {n}" in " ".join(r.get("command", [])) for r in rs if r.get("command"))
    oom = [r for r in rs if r["status"] == "oom"]
    ranks_seen = set()
    for r in rs:
        with contextlib.suppress(OSError):
            ranks_seen |= set(re.findall(r" TP(\d+)\]", Path(r["log_path"]).read_text(errors="replace")))
    c.report(
        f"tp{n}-sweep",
        bool(oom) and statuses.count("ok") >= 2 and tp_ok and len(ranks_seen) == n,
        f"--tp-size {n} on every launch: {tp_ok}; ranks in the logs {sorted(ranks_seen)}; {describe(rs)}; "
        f"first run {first_wall:.0f} s to the interrupt",
    )
    c.report(
        "resume",
        resume.returncode == 0 and len(counted) == 3 and not relaunched,
        f"rc {resume.returncode} in {resume_wall:.0f} s; {len(counted)}/3 trials counted; finished before "
        f"the interrupt and launched again: {len(relaunched)}",
    )
    env_pids = watch.env_ok
    c.report(
        "nvls-env",
        bool(env_pids) and all(env_pids.values()),
        f"{sum(env_pids.values())}/{len(env_pids)} GPU processes had "
        + " ".join(f"{k}={v}" for k, v in NVLS_OFF.items()),
    )


@contextlib.contextmanager
def two_nodes() -> Iterator[Any]:
    """One Ray node per GPU on this host: CUDA_VISIBLE_DEVICES is read by each raylet at its start."""
    from ray.cluster_utils import Cluster

    saved = os.environ.get("CUDA_VISIBLE_DEVICES")
    try:
        os.environ["CUDA_VISIBLE_DEVICES"] = "0"
        cluster = Cluster(
            initialize_head=True,
            head_node_args={
                "num_gpus": 1,
                "num_cpus": 8,
                "resources": {"trial_slot": 1},
                "include_dashboard": False,
            },
        )
        os.environ["CUDA_VISIBLE_DEVICES"] = "1"
        cluster.add_node(num_gpus=1, num_cpus=8, resources={"trial_slot": 1})
        cluster.wait_for_nodes()
    finally:
        if saved is None:
            os.environ.pop("CUDA_VISIBLE_DEVICES", None)
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = saved
    try:
        yield cluster
    finally:
        cluster.shutdown()


def check_nodes(c: Checker) -> None:
    """Two Ray nodes, one GPU each: parallel trials on the right GPUs, and a SIGKILL mid-trial."""
    study = "nodes"
    out = c.out / study
    out.mkdir(parents=True, exist_ok=True)
    spec = write_spec(
        out / "spec.yaml",
        study,
        1,
        [(0.85, 16, 16, 3, 1, 4), (0.8, 16, 16, 2, 1, 3), (0.85, 64, 16, 1, 1, 2)],
        trials=3,
    )
    killed: dict[str, Any] = {}

    def kill_on_gpu1(gpus: list[dict[str, Any]]) -> None:
        # The fault: SIGKILL the process that holds GPU 1 once it has memory there (mid start-up).
        if killed or len(gpus) < 2:
            return
        for pid, used in gpus[1]["procs"]:
            if used > 2048:
                killed.update(pid=pid, port=port_of(pid), at=time.monotonic(), used=used)
                os.kill(pid, signal.SIGKILL)
                print(f"  fault: SIGKILL pid {pid} holding {used:.0f} MiB on GPU 1", flush=True)
                return

    with two_nodes() as cluster:
        import ray

        ray.init(address=cluster.address)
        node_gpu = {}
        for node in ray.nodes():
            # The raylet of each node was started with its own CUDA_VISIBLE_DEVICES.
            node_gpu[node["NodeID"]] = 0 if node["NodeID"] == cluster.head_node.node_id else 1
        ray.shutdown()
        t0 = time.monotonic()
        with GpuWatch(on_sample=kill_on_gpu1) as watch:
            proc = subprocess.run(
                driver_cmd(spec, out, study, "--ray-address", cluster.address),
                cwd=ROOT,
                capture_output=True,
                text=True,
                timeout=480,
            )
        wall = time.monotonic() - t0
        (out / "driver.log").write_text(proc.stdout + proc.stderr)
    rs = results(out, study)
    # Which GPU each trial used: NVML's process list, tied to the trial through its server's port.
    wrong, places = [], []
    for r in rs:
        port = (
            int(r["command"][r["command"].index("--port") + 1]) if "--port" in r.get("command", []) else None
        )
        seen = watch.seen.get(port, set()) if port else set()
        want = node_gpu.get(r["node_id"])
        before = [s["index"] for s in r.get("gpu_before", [])]
        places.append(f"#{r['number']} node GPU {want}, NVML {sorted(seen)}, probe {before}")
        if (seen and seen != {want}) or before != [want]:
            wrong.append(r["number"])
    spans = sorted((r["started_unix"], r["finished_unix"]) for r in rs if r.get("started_unix"))
    overlap = any(b[0] < a[1] for a, b in itertools.pairwise(spans))
    busy = sum(r.get("wall_s", 0.0) for r in rs)
    c.report(
        "two-nodes",
        proc.returncode == 0 and overlap and not wrong and len({r["node_id"] for r in rs}) == 2,
        f"rc {proc.returncode}; sweep wall {wall:.0f} s for {len(rs)} trials ({busy:.0f} s of trial time, "
        f"what one node would need); parallel: {overlap}; {'; '.join(places)}; {describe(rs)}",
    )
    victim = [
        r for r in rs if killed.get("port") and f"--port {killed['port']}" in " ".join(r.get("command", []))
    ]
    if not victim:
        c.report("fault", False, f"no trial was killed (watch: {killed})")
        return
    v = victim[0]
    fail = v.get("failure") or {}
    after = v.get("gpu_after", [])
    clean = bool(after) and all(not s["processes"] and s["used_mib"] <= CLEAN_MIB for s in after)
    later = [r for r in rs if r.get("started_unix", 0) > v.get("finished_unix", 0) - 1 and r is not v]
    c.report(
        "fault",
        v["status"] == "failed" and fail.get("kind") == "crash" and clean and len(rs) == 3 and bool(later),
        f"trial #{v['number']} after SIGKILL of pid {killed['pid']} ({killed['used']:.0f} MiB on GPU 1): "
        f"{v['status']} {fail.get('kind')} ({fail.get('message', '')[:100]}); "
        f"GPU after: {[(s['index'], round(s['used_mib'])) for s in after]}; "
        f"{len(later)} trial(s) started after it",
    )


def check_final(c: Checker) -> None:
    clean, _waited, _ = wait_clean(30)
    used = smi_used_mib()
    procs = sglang_processes()
    c.report(
        "final",
        all(u == 0 for u in used) and not procs and clean,
        f"nvidia-smi memory.used {used} MiB; sglang processes {[p.pid for p in procs]}",
    )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="gpu-check-runs", help="where the sweeps write (default %(default)s)")
    p.add_argument("--only", default="tp,nodes,final", help="comma-separated checks (default %(default)s)")
    args = p.parse_args()
    missing = [k for k, v in NVLS_OFF.items() if os.environ.get(k) != v]
    if missing:
        print(f"error: set {' '.join(f'{k}={NVLS_OFF[k]}' for k in missing)} first (gpu-check.sh does)")
        return 2
    gpus = len(nvml_snapshot())
    c = Checker(Path(args.out).resolve(), gpus)
    c.out.mkdir(parents=True, exist_ok=True)
    only = args.only.split(",")
    t0 = time.monotonic()
    for name, fn in (("tp", check_tp), ("nodes", check_nodes), ("final", check_final)):
        if name not in only:
            continue
        if name == "nodes" and gpus < 2:
            c.report("two-nodes", False, f"needs two GPUs, this machine has {gpus}")
            continue
        t = time.monotonic()
        try:
            fn(c)
        except Exception as err:
            c.report(name, False, f"{type(err).__name__}: {err}")
        print(f"  ({name}: {time.monotonic() - t:.0f} s)", flush=True)
    failed = [r.name for r in c.results if not r.ok]
    print(
        f"gpu-check: {len(c.results) - len(failed)} passed, {len(failed)} failed"
        f"{' (' + ', '.join(failed) + ')' if failed else ''} in {time.monotonic() - t0:.0f} s "
        f"on {gpus} GPU(s)"
    )
    return len(failed)


if __name__ == "__main__":
    sys.exit(main())
