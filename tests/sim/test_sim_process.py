"""The simulated node as a real process: start-up lines, HTTP API, failures, stop, fake NVML."""

from __future__ import annotations

import asyncio
import itertools
import json
import random
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from simhelp import KIMI, spec

from orchestrator.engines.sglang.logparse import parse_log
from orchestrator.records import FailureKind, FailureStage
from orchestrator.sim.nvml import FakeNvml
from orchestrator.sim.profile import load_profile

REPO = Path(__file__).resolve().parents[2]
TINY_RUN = [
    *spec(3, 1, 4),
    "--skip-tokenizer-init",
    "--cuda-graph-max-bs",
    "16",
    "--max-running-requests",
    "16",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Sim:
    """One simulated server, its output collected line by line."""

    def __init__(
        self, tmp: Path, *flags: str, profile: str | dict[str, Any] = "h200-tiny", port: int | None = None
    ) -> None:
        self.port = port or free_port()
        self.state = tmp / "gpus"
        if isinstance(profile, dict):
            path = tmp / "profile.json"
            path.write_text(json.dumps(profile))
            profile = str(path)
        self.profile = load_profile(profile)
        argv = [
            sys.executable, "-m", "orchestrator.sim.server", "--model-path", "/models/tiny", *flags,
            "--host", "127.0.0.1", "--port", str(self.port), "--sim-profile", profile,
            "--sim-state-dir", str(self.state), "--sim-startup-time-scale", "0",
        ]  # fmt: skip
        self.proc = subprocess.Popen(
            argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        self.lines: list[str] = []
        self._changed = threading.Condition()  # a new line, or the end of the output
        self._ended = False
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._changed:
                self.lines.append(line.rstrip("\n"))
                self._changed.notify_all()
        with self._changed:
            self._ended = True
            self._changed.notify_all()

    def wait_for(self, text: str, timeout: float = 30.0) -> int:
        """The index of the first line holding `text`, as soon as the server prints it; fails once its
        output has ended without it, or after `timeout` (a bound for a hung server only: a loaded
        machine starts it slower, never differently)."""

        def found() -> int | None:
            return next((i for i, line in enumerate(self.lines) if text in line), None)

        with self._changed:
            self._changed.wait_for(lambda: found() is not None or self._ended, timeout)
            index = found()
        if index is None:
            raise AssertionError(f"{text!r} not in output:\n" + "\n".join(self.lines[-30:]))
        return index

    def exit_code(self, timeout: float = 5.0) -> int:
        rc = self.proc.wait(timeout)
        self._reader.join(2)
        return rc

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def get(self, path: str) -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(self.url(path), timeout=5) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as err:
            return err.code, err.read()

    def post(self, path: str, body: dict[str, Any] | None = None) -> tuple[int, bytes]:
        data = json.dumps(body or {}).encode()
        req = urllib.request.Request(self.url(path), data=data, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as err:
            return err.code, err.read()

    def nvml(self) -> FakeNvml:
        return FakeNvml.for_profile(self.state, self.profile)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(5)


@pytest.fixture
def sims(tmp_path: Path) -> Iterator[list[Sim]]:
    started: list[Sim] = []
    yield started
    for s in started:
        s.close()


def start(sims: list[Sim], tmp: Path, *flags: str, **kw: Any) -> Sim:
    sim = Sim(tmp, *flags, **kw)
    sims.append(sim)
    return sim


def test_serves_like_sglang_and_stops_cleanly_on_sigint(sims: list[Sim], tmp_path: Path) -> None:
    good = {"base": "h200-tiny", "name": "tiny-good-draft", "accept_p0": 0.9, "accept_decay": 0.95}
    flags = [*TINY_RUN, "--mem-fraction-static", "0.85", "--random-seed", "3", "--enable-metrics"]
    sim = start(sims, tmp_path, *flags, profile=good)
    sim.wait_for("The server is fired up and ready to roll!")
    order = [
        "server_args=ServerArgs(",
        "Load weight begin. avail mem=139.09 GB",
        "type=LlamaForCausalLMEagle3",
        "KV Cache is allocated. dtype: torch.bfloat16, #tokens: ",
        "Capture target prefill CUDA graph begin. backend=breakable",
        "Capture target verify CUDA graph begin. backend=full, num_tokens_per_req=4, "
        "bs=[1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16]",
        "Capture draft decode CUDA graph end.",
        "Capture draft extend CUDA graph end.",
        "max_total_num_tokens=",
        "Engine startup timings (s): ",
        "Uvicorn running on http://127.0.0.1:",
        "Prefill batch, #new-seq: 1, #new-token: 3,",
        "The server is fired up and ready to roll!",
    ]
    positions = [sim.wait_for(text) for text in order]
    assert positions == sorted(positions)
    assert sim.lines[0].startswith("\x1b[1;33m'--cuda-graph-max-bs' is deprecated")
    running = sim.nvml().snapshot()[0]
    assert running.processes and running.processes[0].pid == sim.proc.pid
    assert 120_000 < running.used_mib < 125_000  # about the 123588 MiB nvidia-smi showed

    assert sim.get("/health")[0] == 200
    # Streaming: cumulative output_ids, several tokens per step, speculative counts on the last chunk.
    body = {"input_ids": list(range(72)), "sampling_params": {"max_new_tokens": 64, "temperature": 0,
            "ignore_eos": True}, "stream": True}  # fmt: skip
    status, raw = sim.post("/generate", body)
    assert status == 200
    events = [e for e in raw.decode().split("\n\n") if e]
    assert events[-1] == "data: [DONE]"
    chunks = [json.loads(e.removeprefix("data: ")) for e in events[:-1]]
    assert (
        chunks[0]["meta_info"]["completion_tokens"] == 1 and chunks[0]["meta_info"]["finish_reason"] is None
    )
    assert "spec_verify_ct" not in chunks[0]["meta_info"]
    for a, b in itertools.pairwise(chunks):
        assert b["output_ids"][: len(a["output_ids"])] == a["output_ids"]  # cumulative
    meta = chunks[-1]["meta_info"]
    assert meta["finish_reason"] == {"type": "length", "length": 64}
    assert meta["prompt_tokens"] == 72 and meta["completion_tokens"] == 64 == len(chunks[-1]["output_ids"])
    assert len(chunks) < 64  # a step accepts several draft tokens
    assert meta["spec_accept_length"] == pytest.approx(64 / meta["spec_verify_ct"])
    assert meta["spec_accept_length"] > 2.0
    assert sum(meta["spec_accept_histogram"]) == meta["spec_verify_ct"]
    assert meta["spec_proposed_drafts"] == 3 * meta["spec_verify_ct"]
    assert {"e2e_latency", "num_retractions", "cached_tokens", "id"} <= set(meta)

    assert sim.post("/flush_cache")[0] == 200
    status, raw = sim.post("/generate", {"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 40}})
    done = json.loads(raw)
    info = json.loads(sim.get("/get_server_info")[1])
    state = info["internal_states"][0]
    assert info["status"] == "ready" and info["version"] == "0.5.17"
    assert state["avg_spec_accept_length"] == pytest.approx(done["meta_info"]["spec_accept_length"], rel=0.1)
    assert state["memory_usage"]["token_capacity"] == info["max_total_num_tokens"]
    assert state["effective_max_running_requests_per_dp"] == 16
    assert json.loads(sim.get("/get_model_info")[1])["architectures"] == ["LlamaForCausalLM"]
    metrics = sim.get("/metrics")[1].decode()
    assert "# TYPE sglang:spec_accept_length gauge" in metrics and "sglang:gen_throughput{" in metrics

    sim.proc.send_signal(signal.SIGINT)
    assert sim.exit_code() == 0
    assert "INFO:     Shutting down" in "\n".join(sim.lines)
    after = sim.nvml().snapshot()[0]
    assert not after.processes and after.used_mib == sim.profile.driver_reserve_mib

    report = parse_log("\n".join(sim.lines))
    assert report.ready and report.failure is None
    assert report.memory.kv_cache_tokens == info["max_total_num_tokens"]


def test_kv_failure_exits_minus_9_right_after_the_value_error(sims: list[Sim], tmp_path: Path) -> None:
    sim = start(sims, tmp_path, *TINY_RUN, "--mem-fraction-static", "0.0001")
    assert sim.exit_code() == -9
    text = "\n".join(sim.lines)
    i = sim.wait_for("ValueError: Loaded weights leave no GPU memory for the KV cache under "
                     "--mem-fraction-static=0.0001. Raise --mem-fraction-static above 0.002")  # fmt: skip
    assert "Received sigquit from a child process" in sim.lines[i + 2]
    pid = sim.proc.pid
    assert sim.lines[-1].endswith(
        f"kill_process_tree called: parent_pid={pid}, include_parent=True, pid={pid}"
    )
    assert "Capture" not in text
    report = parse_log(text)
    assert report.failure is not None and report.failure.stage is FailureStage.KV_ALLOCATION
    assert report.failure.kind is FailureKind.OOM
    assert not sim.nvml().snapshot()[0].processes


def test_graph_oom_prints_the_wrapped_exception(sims: list[Sim], tmp_path: Path) -> None:
    # The users' case: auto fraction (0.76) and an aggressive draft tree run out at draft graph capture.
    sim = start(sims, tmp_path, "--tp-size", "8", *spec(5, 8, 32), "--cuda-graph-max-bs", "128", profile=KIMI)
    assert sim.exit_code() == -9
    text = "\n".join(sim.lines)
    assert "Max running requests is reset to 48 for speculative decoding." in text
    assert "[2026" in sim.lines[2] and " TP0] Load weight begin." in text  # TP > 1: the rank tag
    begin = sim.wait_for("Capture draft decode CUDA graph begin. backend=full, num_tokens_per_req=8")
    assert sim.lines[begin + 1].endswith("Scheduler hit an exception: Traceback (most recent call last):")
    assert "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate " in text
    assert "Exception: Capture cuda graph failed: CUDA out of memory." in text
    assert "Possible solutions:" in text and "eagle_worker_v2.py" in text
    report = parse_log(text)
    assert report.failure is not None
    assert report.failure.stage is FailureStage.DRAFT_GRAPH_CAPTURE and report.failure.kind is FailureKind.OOM
    assert report.args is not None and report.args.mem_fraction_static == 0.76
    assert all(not s.processes for s in sim.nvml().snapshot())


def test_sigkill_frees_the_fake_gpu_and_sigterm_drains(sims: list[Sim], tmp_path: Path) -> None:
    killed = start(sims, tmp_path / "a", *TINY_RUN)
    termed = start(sims, tmp_path / "b", *TINY_RUN)
    killed.wait_for("The server is fired up")
    termed.wait_for("The server is fired up")
    assert killed.nvml().snapshot()[0].processes
    killed.proc.send_signal(signal.SIGKILL)
    assert killed.exit_code() == -9
    assert not killed.nvml().snapshot()[0].processes  # the driver frees a dead process's memory

    holder: dict[str, Any] = {}
    worker = threading.Thread(target=lambda: holder.update(r=termed.post("/generate", {
        "input_ids": [1] * 10, "sampling_params": {"max_new_tokens": 150}})))  # fmt: skip
    worker.start()
    termed.wait_for("Prefill batch, #new-seq: 1, #new-token: 10")
    termed.proc.send_signal(signal.SIGTERM)
    assert termed.exit_code() == -9  # SGLang's launcher kills its own tree after draining
    worker.join(5)
    status, raw = holder["r"]
    assert status == 200 and json.loads(raw)["meta_info"]["completion_tokens"] == 150  # drained, not cut
    text = "\n".join(termed.lines)
    assert text.index("SIGTERM received.") < text.index(
        "Gracefully exiting... Remaining number of requests 0."
    )
    assert not termed.nvml().snapshot()[0].processes


def test_small_kv_pool_retracts_under_load(sims: list[Sim], tmp_path: Path) -> None:
    sim = start(sims, tmp_path, *TINY_RUN, "--max-total-tokens", "700", "--decode-log-interval", "10")
    sim.wait_for("The server is fired up")

    async def burst() -> list[dict[str, Any]]:
        body = {"input_ids": [5] * 30, "sampling_params": {"max_new_tokens": 120, "ignore_eos": True}}
        async with aiohttp.ClientSession() as session:

            async def one() -> dict[str, Any]:
                async with session.post(sim.url("/generate"), json=body) as r:
                    assert r.status == 200
                    return dict(await r.json())

            return await asyncio.gather(*(one() for _ in range(8)))

    results = asyncio.run(burst())
    assert all(r["meta_info"]["completion_tokens"] == 120 for r in results)  # slow, not dead
    assert sum(r["meta_info"]["num_retractions"] for r in results) > 0
    assert sim.wait_for("KV cache pool is full. Retract requests. #retracted_reqs: ") > 0
    report = parse_log("\n".join(sim.lines))
    assert report.retractions > 0 and report.failure is None


def test_port_in_use_is_found_late_and_hangs_like_sglang(sims: list[Sim], tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        sim = start(sims, tmp_path, *TINY_RUN, port=taken.getsockname()[1])
        line = sim.lines[sim.wait_for("[Errno 98] error while attempting to bind on address")]
        assert line.endswith(f"('127.0.0.1', {sim.port}): address already in use")
        sim.wait_for("INFO:     Waiting for application shutdown.")
        sim.proc.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        assert sim.proc.poll() is None  # SIGTERM is ignored; the GPU memory stays held
        assert sim.nvml().snapshot()[0].processes
        sim.proc.send_signal(signal.SIGKILL)
        assert sim.exit_code() == -9
    assert "The server is fired up" not in "\n".join(sim.lines)
    assert parse_log("\n".join(sim.lines)).port_in_use


def test_unknown_flag_is_refused_before_anything_starts(sims: list[Sim], tmp_path: Path) -> None:
    sim = start(sims, tmp_path, "--no-such-flag")
    assert sim.exit_code() == 2
    assert "launch_server.py: error: unrecognized arguments: --no-such-flag" in "\n".join(sim.lines)


def test_text_prompts_are_accepted_better_and_outputs_follow_the_prompt(
    sims: list[Sim], tmp_path: Path
) -> None:
    profile = {"base": "h200-tiny", "accept_p0": 0.3, "text_accept_p0": 0.95, "text_accept_decay": 0.95}
    sim = start(sims, tmp_path, *TINY_RUN, profile=profile)
    sim.wait_for("The server is fired up")
    text_ids = [1, 3, *([40, 41, 42, 43, 44, 40, 45, 41, 46] * 6), 5, 4]  # repeats, like words do
    random_ids = random.Random(0).sample(range(32000), len(text_ids))

    def generate(ids: list[int]) -> dict[str, Any]:
        status, raw = sim.post("/generate", {"input_ids": ids, "sampling_params": {"max_new_tokens": 200}})
        assert status == 200, raw
        return dict(json.loads(raw))

    text, again, rand = generate(text_ids), generate(text_ids), generate(random_ids)
    assert text["meta_info"]["spec_accept_length"] > 3.0  # near the 4 a 3-step chain can give
    assert rand["meta_info"]["spec_accept_length"] < 1.8
    assert text["output_ids"] == again["output_ids"]  # greedy: the prompt decides the output
    assert text["output_ids"] != rand["output_ids"]


def test_adaptive_tiers_switch_as_the_batch_crosses_a_bucket_as_on_the_h200(
    sims: list[Sim], tmp_path: Path
) -> None:
    # SGLang's default tiers per bucket ("1": 1/3/7, "8": 0/1/3, ...). A burst of 8 that drains one by one
    # moves the running batch across buckets, and 0.5.17 prints each change of tier (the tiny profile's
    # dummy draft accepts nothing, so its tiers fall to their lowest).
    sim = start(
        sims, tmp_path, *spec(7, 1, 8), "--skip-tokenizer-init", "--cuda-graph-max-bs", "16",
        "--max-running-requests", "16", "--speculative-adaptive",
    )  # fmt: skip
    sim.wait_for("The server is fired up")

    async def burst() -> None:
        async with aiohttp.ClientSession() as session:

            async def one(n: int) -> None:
                body = {"input_ids": [5] * 20, "sampling_params": {"max_new_tokens": 40 + 20 * n}}
                async with session.post(sim.url("/generate"), json=body) as r:
                    assert r.status == 200

            await asyncio.gather(*(one(n) for n in range(8)))

    asyncio.run(burst())
    switches = parse_log("\n".join(sim.lines)).adaptive_switches
    assert switches, sim.lines[-20:]
    assert all(a != b and {a, b} <= {0, 1, 3, 7} for a, b in switches)
