"""Benchmark 4, the benchmark client's ceiling: how fast `run_stage` can consume a stream on one core.

A server that streams pre-rendered 0.5.17-shaped chunks as fast as it can runs in its own process, pinned
to one CPU; the client runs in another process, pinned to the other, and measures `run_stage` with
`time.process_time` (its own CPU only). Tokens/s is what the client saw end to end; CPU per token says how
much serving speed the client could follow before it, not the server, sets the measured throughput.

The child side is `python -m benchmarks.system.client_ceiling --url URL --output-len N ...` (prints JSON).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass

from benchmarks.harness.paths import ROOT
from benchmarks.harness.table import Row

log = logging.getLogger(__name__)
BENCH = "4 client ceiling"
INPUT_LEN = 16
SGLANG_WHY_NOT = (
    "SGLang's own bench_serving was not run against the same server: it cannot be imported without CUDA "
    "packages. In the sglang 0.5.17 wheel (pip download sglang==0.5.17 --no-deps), sglang/bench_serving.py "
    "only re-exports sglang.benchmark.serving, and importing it runs sglang/__init__.py, which imports "
    "sglang.srt.utils (module level: torch, torch.distributed, triton, torchvision, PIL, zmq, orjson, "
    "pybase64); sglang/benchmark/serving.py itself imports transformers (AutoTokenizer) and "
    "sglang.srt.disaggregation.utils (torch, torch.distributed) at module level. So it needs torch and "
    "triton, the heavy GPU stack the project keeps optional."
)


@dataclass(frozen=True)
class CeilingSettings:
    # (output tokens per request, concurrency, requests)
    shapes: tuple[tuple[int, int, int], ...] = ((128, 64, 512), (1024, 64, 96))


# -- the client side (child process) ---------------------------------------------------------------


async def _measure(url: str, output_len: int, concurrency: int, prompts: int) -> dict[str, float]:
    from orchestrator.bench.client import new_session, run_stage
    from orchestrator.bench.workload import synthetic_requests
    from orchestrator.engines import engine_for
    from orchestrator.spec.engine_catalog import EngineName

    # The stream server answers as SGLang does: the client speaks SGLang's API, from the engine registry.
    api = engine_for(EngineName.SGLANG.value).api
    requests = synthetic_requests(prompts, INPUT_LEN, output_len, 32000, seed=0)
    async with new_session() as session:
        await run_stage(url, requests[: min(4, prompts)], 4, api=api, timeout_s=60, session=session)  # warm
        cpu0 = time.process_time()
        outcomes, duration = await run_stage(
            url, requests, concurrency, api=api, timeout_s=600, session=session
        )
        cpu = time.process_time() - cpu0
    tokens = sum(o.completion_tokens for o in outcomes if o.success)
    return {
        "tokens": float(tokens),
        "requests": float(sum(o.success for o in outcomes)),
        "failed": float(sum(not o.success for o in outcomes)),
        "duration_s": duration,
        "cpu_s": cpu,
    }


def client_main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.system.client_ceiling")
    p.add_argument("--url", required=True)
    p.add_argument("--output-len", type=int, required=True)
    p.add_argument("--concurrency", type=int, required=True)
    p.add_argument("--prompts", type=int, required=True)
    args = p.parse_args(argv)
    cpus = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cpus[0]})
    result = asyncio.run(_measure(args.url, args.output_len, args.concurrency, args.prompts))
    result["cpus"] = float(len(os.sched_getaffinity(0)))
    print(json.dumps(result))
    return 0


# -- the harness side --------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_up(url: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url + "/health", timeout=1) as resp:
                if resp.status == 200:
                    return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"the stream server at {url} did not come up in {timeout_s:g} s")


def sglang_probe(sglang_path: str | None) -> str:
    """Try `import sglang.bench_serving` in a fresh interpreter; '' when it imports, else its error."""
    env = dict(os.environ)
    if sglang_path:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [sglang_path, env.get("PYTHONPATH", "")]))
    proc = subprocess.run(
        [sys.executable, "-c", "import sglang.bench_serving"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    if proc.returncode == 0:
        return ""
    lines = [line for line in proc.stderr.strip().splitlines() if line.strip()]
    return lines[-1] if lines else f"exit code {proc.returncode}"


def run_ceiling(settings: CeilingSettings, sglang_path: str | None = None) -> tuple[list[Row], list[str]]:
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.system.stream_server", "--port", str(port)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    rows: list[Row] = []
    try:
        _wait_up(url)
        for output_len, concurrency, prompts in settings.shapes:
            proc = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "benchmarks.system.client_ceiling",
                    "--url",
                    url,
                    "--output-len",
                    str(output_len),
                    "--concurrency",
                    str(concurrency),
                    "--prompts",
                    str(prompts),
                ],
                cwd=ROOT,
                capture_output=True,
                text=True,
                timeout=900,
                check=True,
            )
            m = json.loads(proc.stdout.strip().splitlines()[-1])
            case = f"{output_len} tokens/request, concurrency {concurrency}"
            variant = f"specsweep run_stage, {prompts} requests"
            tok_s = m["tokens"] / m["duration_s"]
            rows += [
                Row(BENCH, case, variant, "streamed tokens/s", tok_s, f"{tok_s:,.0f}"),
                Row(BENCH, case, variant, "requests/s", m["requests"] / m["duration_s"],
                    f"{m['requests'] / m['duration_s']:.1f}"),
                Row(BENCH, case, variant, "client CPU per token", 1e6 * m["cpu_s"] / max(1.0, m["tokens"]),
                    f"{1e6 * m['cpu_s'] / max(1.0, m['tokens']):.1f} µs"),
                Row(BENCH, case, variant, "client CPU busy (cpu / wall)", m["cpu_s"] / m["duration_s"],
                    f"{100 * m['cpu_s'] / m['duration_s']:.0f} %"),
            ]  # fmt: skip
            if m["failed"]:
                rows.append(Row(BENCH, case, variant, "failed requests", m["failed"], f"{m['failed']:g}"))
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=10)
    probe = sglang_probe(sglang_path)
    where = " from the given unpacked wheel" if sglang_path else ""
    notes = [
        "Client ceiling: the server writes pre-rendered chunks (one per token, cumulative output_ids, "
        "0.5.17's meta_info keys, compact JSON) from its own process pinned to one CPU; the client "
        "process is "
        "pinned to another and timed with time.process_time around run_stage (a 4-request warm-up first). "
        "CPU busy near 100 % means the client is the bottleneck, so these tokens/s are its ceiling on one "
        "core; a real server slower than that is measured correctly.",
        SGLANG_WHY_NOT
        + (
            f" Here, import sglang.bench_serving{where} fails with: {probe}."
            if probe
            else f" Here sglang.bench_serving imports{where}, but a side-by-side run is not implemented."
        ),
    ]
    return rows, notes


if __name__ == "__main__":
    sys.exit(client_main())
