"""The SGLang log parser against real 0.5.17 logs from an H200 and per-version logs built from the sources."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.engines.logrecords import LogEvent
from orchestrator.engines.sglang.logparse import LogParser, SglangLogReport, parse_log
from orchestrator.engines.sglang.pyrepr import parse_mapping, parse_server_args
from orchestrator.records import FailureKind, FailureStage

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "sglang"


def read(version: str, name: str) -> str:
    return (FIXTURES / version / name).read_text(encoding="utf-8")


def parse(version: str, name: str) -> SglangLogReport:
    return parse_log(read(version, name))


def feed_all(text: str) -> tuple[LogParser, list[tuple[int, LogEvent]]]:
    """Feed line by line with `now` = the line's index; return the events that were not NONE."""
    parser = LogParser()
    events: list[tuple[int, LogEvent]] = []
    for i, line in enumerate(text.splitlines()):
        event = parser.feed(line + "\n", now=float(i))
        if event is not LogEvent.NONE:
            events.append((i, event))
    return parser, events


def index_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines()) if needle in line)


S, K = FailureStage, FailureKind
# tools/capture-pools.sh: each launch stopped once ready (max running, graph bs).
CAPTURE_POOLS = [(96, 96), (96, 256), (100, 100), (100, 256)]
OUTCOMES = [
    # version, file, ready, failure stage, failure kind
    ("0.5.17", "ok.log", True, None, None),
    ("0.5.17", "accept.log", True, None, None),
    ("0.5.17", "kv-oom.log", False, S.KV_ALLOCATION, K.OOM),
    ("0.5.17", "graph-oom.log", False, S.TARGET_GRAPH_CAPTURE, K.OOM),
    ("0.5.17", "graph-oom-0.994.log", False, S.TARGET_GRAPH_CAPTURE, K.OOM),
    ("0.5.17", "graph-oom-cublas.log", False, S.TARGET_GRAPH_CAPTURE, K.OOM),
    ("0.5.17", "tp2-ok.log", True, None, None),
    ("0.5.17", "tp2-ok-0.8.log", True, None, None),
    ("0.5.17", "tp2-kv-oom.log", False, S.KV_ALLOCATION, K.OOM),
    ("0.5.17", "scheduler-killed.log", False, S.KV_ALLOCATION, K.CRASH),
    ("0.5.17", "tp8-ok.log", True, None, None),
    ("0.5.17", "tp8-kv-oom.log", False, S.KV_ALLOCATION, K.OOM),
    ("0.5.5", "ok.log", True, None, None),
    ("0.5.5", "kv-oom.log", False, S.KV_ALLOCATION, K.OOM),
    ("0.5.5", "draft-graph-oom.log", False, S.DRAFT_GRAPH_CAPTURE, K.OOM),
    ("0.5.9", "ok.log", True, None, None),
    ("0.5.9", "topk1-adjusted.log", True, None, None),
    ("0.5.9", "graph-crash.log", False, S.TARGET_GRAPH_CAPTURE, K.CRASH),
    ("0.5.9", "runtime-oom.log", True, S.UNDER_LOAD, K.OOM),
    ("0.5.14", "ok.log", True, None, None),
    ("0.5.14", "kv-oom.log", False, S.KV_ALLOCATION, K.OOM),
    ("0.5.14", "port-in-use.log", False, S.WARMUP, K.PORT_IN_USE),
    ("0.5.23", "ok.log", True, None, None),
    ("0.5.23", "draft-graph-oom.log", False, S.DRAFT_GRAPH_CAPTURE, K.OOM),
    # specsweep's own sweep on an H200 (a subfolder of its version)
    ("0.5.17/specsweep-h200", "ok-accept.log", True, None, None),
    ("0.5.17/specsweep-h200", "ok-dummy.log", True, None, None),
    ("0.5.17/specsweep-h200", "kv-oom.log", False, S.KV_ALLOCATION, K.OOM),
    ("0.5.17/specsweep-h200", "graph-oom.log", False, S.TARGET_GRAPH_CAPTURE, K.OOM),
    # A chat sweep on one H200 with adaptive speculation searched (test_chat_h200.py reads them too).
    ("0.5.17/chat-h200", "ok-fixed.log", True, None, None),
    ("0.5.17/chat-h200", "ok-adaptive-default.log", True, None, None),
    ("0.5.17/chat-h200", "ok-adaptive-tiers.log", True, None, None),
    ("0.5.17/chat-h200", "kv-oom.log", False, S.KV_ALLOCATION, K.OOM),
    # The Llama-3-8B shape with dummy weights on one H200 (test_logparse_8b.py reads their figures).
    ("0.5.17/llama8b-h200", "f50b16.log", True, None, None),
    ("0.5.17/llama8b-h200", "f50b256.log", True, None, None),
    ("0.5.17/llama8b-h200", "f85b16.log", True, None, None),
    ("0.5.17/llama8b-h200", "f85b256.log", True, None, None),
    ("0.5.17/llama8b-h200", "f95b16.log", True, None, None),
    ("0.5.17/llama8b-h200", "f95b256.log", True, None, None),
    ("0.5.17/llama8b-h200", "kvfloor010.log", False, S.KV_ALLOCATION, K.OOM),
    ("0.5.17/llama8b-h200", "f98b256s4k2d8.log", False, S.DRAFT_GRAPH_CAPTURE, K.OOM),
    ("0.5.17/llama8b-h200", "f96b256s4k2d8.log", True, None, None),
    ("0.5.17/llama8b-h200", "f97b256s4k2d8.log", True, None, None),
    # served, then out of memory under load at concurrency 32 in a Triton kernel (a RuntimeError, not
    # torch's OutOfMemoryError): the same configuration as llama8b-live's trial 2, launched again
    ("0.5.17/llama8b-h200", "f98b32s4k2d8-triton-oom-under-load.log", True, S.UNDER_LOAD, K.OOM),
    # the ground-truth grid measured on the H200: every launch started, served both stages and stopped
    *[(f"0.5.17/llama8b-grid/trials/{n:04d}", "server.log", True, None, None) for n in range(14)],
    *[(f"0.5.17/llama8b-grid/repeat/trials/{n:04d}", "server.log", True, None, None) for n in range(2)],
    *[(f"0.5.17/llama8b-trees/trials/{n:04d}", "server.log", True, None, None) for n in range(8)],
    *[(f"0.5.17/llama8b-trees-2/trials/{n:04d}", "server.log", True, None, None) for n in range(5)],
    *[(f"0.5.17/llama8b-trees-3/trials/{n:04d}", "server.log", True, None, None) for n in range(4)],
    # the Qwen3-32B shape's sweep: trial 4 was stopped by the driver while its server started (not a failure)
    *[(f"0.5.17/qwen32b-sweep/trials/{n:04d}", "server.log", True, None, None) for n in (0, 1, 2, 3, 5, 6)],
    ("0.5.17/qwen32b-sweep/trials/0004", "server.log", False, None, None),
    # the 8B shape's serving boundaries at concurrency 32: both served; the third was stopped while starting
    *[(f"0.5.17/llama8b-serving/trials/{n:04d}", "server.log", True, None, None) for n in (0, 1)],
    ("0.5.17/llama8b-serving/trials/0002", "server.log", False, None, None),
    # ... and that third launch (s4k4d16 at 0.98), made later: out of memory under load, as predicted
    ("0.5.17/llama8b-serving-2/trials/0000", "server.log", True, S.UNDER_LOAD, K.OOM),
    # the Qwen3-32B shape's boundaries: three ran out of memory under load (Triton, torch, Triton), one served
    *[(f"0.5.17/qwen32b-serving/trials/{n:04d}", "server.log", True, S.UNDER_LOAD, K.OOM) for n in (0, 1, 2)],
    ("0.5.17/qwen32b-serving/trials/0003", "server.log", True, None, None),
    # ... and below them: s4k4d16 at 0.96 and s4k4d8 at 0.97 served, as predicted before the launch
    *[(f"0.5.17/qwen32b-serving-2/trials/{n:04d}", "server.log", True, None, None) for n in (0, 1)],
    # the proposal policy's own sweep of trials/h200-8b.yaml on the H200 (test_policy_live_h200.py);
    # trial 2 (s4k2d8 at fraction 0.98) ran out of memory under load, in the draft's prefill extend
    *[(f"0.5.17/llama8b-live/trials/{n:04d}", "server.log", True, None, None) for n in (0, 1, 3, 4, 5, 6, 7)],
    ("0.5.17/llama8b-live/trials/0002", "server.log", True, S.UNDER_LOAD, K.OOM),
    # the Mistral-Small-24B shape, never fitted on: its sweep (the baseline and three trees) and two
    # boundaries at concurrency 32, every launch served (test_unseen_shape_h200.py)
    *[(f"0.5.17/mistral24b-sweep/trials/{n:04d}", "server.log", True, None, None) for n in range(4)],
    *[(f"0.5.17/mistral24b-serving/trials/{n:04d}", "server.log", True, None, None) for n in range(2)],
    # ... then the baseline and s1k4d2 at 0.98 served; s4k4d8 and s4k4d16 at 0.98 ran out under load
    *[(f"0.5.17/mistral24b-boundary/trials/{n:04d}", "server.log", True, None, None) for n in range(2)],
    *[(f"0.5.17/mistral24b-peak/trials/{n:04d}", "server.log", True, S.UNDER_LOAD, K.OOM) for n in range(2)],
    # its draft saved under a name SGLang reads as Mistral's native format: FileNotFoundError for params.json
    ("0.5.17/mistral24b-params-json", "server.log", False, S.LAUNCH, K.CRASH),
    # the QwQ-32B shape (Qwen2, QKV biases) at 0.98: s3k1d4 served, s4k4d8 ran out under load (Triton)
    ("0.5.17/qwq32b-peak/trials/0000", "server.log", True, None, None),
    ("0.5.17/qwq32b-peak/trials/0001", "server.log", True, S.UNDER_LOAD, K.OOM),
    # the real pair's grid (SmolLM2-135M and a draft trained here), its first seven launches: all served
    *[(f"0.5.17/smollm2-grid/trials/{n:04d}", "server.log", True, None, None) for n in range(7)],
    # ... and the chat-corpus draft's on an H100 (trial 4 was cut off with its node: no log)
    *[
        (f"0.5.17/smollm2-chat-h100/trials/{n:04d}", "server.log", True, None, None)
        for n in (0, 1, 2, 3, *range(5, 14), *range(15, 23))
    ],
    # the product's own sweep of the pair (trials/smollm2-h200.yaml) on one H100
    *[(f"0.5.17/smollm2-sweep-h100/trials/{n:04d}", "server.log", True, None, None) for n in range(5)],
    # ... and begun again on a second H100 with the draft retrained from its seed
    *[(f"0.5.17/smollm2-sweep-h100-b/trials/{n:04d}", "server.log", True, None, None) for n in range(6)],
    ("0.5.17/smollm2-sweep-h100-b/baseline-on-b/trials/0000", "server.log", True, None, None),
    # ... and begun a third time, every launch on one H100, the draft retrained on it (the same sha256)
    *[(f"0.5.17/smollm2-sweep-h100-c/trials/{n:04d}", "server.log", True, None, None) for n in range(6)],
    # ... and carried to a second H100 (trials 6-8)
    *[
        (f"0.5.17/smollm2-sweep-h100-c-resumed/trials/000{n}", "server.log", True, None, None)
        for n in (6, 7, 8)
    ],
    # the pair's grid of twelve trees and the baseline on one H100 (trials/smollm2-grid12.yaml): all served
    *[(f"0.5.17/smollm2-grid12-h100/trials/{n:04d}", "server.log", True, None, None) for n in range(13)],
    # the user's spec and the grid's best servers again, on one other H100 in one lease
    *[(f"0.5.17/smollm2-sweep-h100-d/trials/{n:04d}", "server.log", True, None, None) for n in range(5)],
    *[
        (f"0.5.17/smollm2-grid12-repeat-h100-d/trials/{n:04d}", "server.log", True, None, None)
        for n in range(2)
    ],
    *[("0.5.17/capture-pools", f"mrr{m}-gbs{g}.log", True, None, None) for m, g in CAPTURE_POOLS],
]


@pytest.mark.parametrize(("version", "name", "ready", "stage", "kind"), OUTCOMES)
def test_every_fixture_is_classified(
    version: str, name: str, ready: bool, stage: FailureStage | None, kind: FailureKind | None
) -> None:
    report = parse(version, name)
    assert report.ready is ready
    if stage is None:
        assert report.failure is None
        # A server that served reached the load; one stopped by the driver while it started did not.
        assert report.last_stage is (FailureStage.UNDER_LOAD if ready else FailureStage.LAUNCH)
    else:
        assert report.failure is not None
        assert (report.failure.stage, report.failure.kind) == (stage, kind)
        assert report.last_stage is stage


def test_every_fixture_folder_is_tested() -> None:
    # Every depth: a subfolder of a version (a sweep's own logs) is a fixture folder too.
    # A sweep's own console (driver.log) is no server log: the records test of its folder reads it.
    on_disk = {
        (p.parent.relative_to(FIXTURES).as_posix(), p.name)
        for p in FIXTURES.rglob("*.log")
        if p.name != "driver.log"
    }
    assert ("0.5.17/specsweep-h200", "ok-dummy.log") in on_disk
    assert on_disk == {(v, n) for v, n, *_ in OUTCOMES}
    # Folders of records inside a version (a sweep's logs, its trial records) have tests of their own.
    tests = "".join(p.read_text() for p in FIXTURES.parents[1].rglob("test_*.py"))
    for folder in (d for d in FIXTURES.glob("*/*") if d.is_dir()):
        where = f"{folder.parent.name}/{folder.name}"
        assert f'"{folder.name}"' in tests, f"no test reads fixtures/sglang/{where}"


# --- the real 0.5.17 start-up ------------------------------------------------------------------


def test_ok_memory_account_matches_the_real_figures() -> None:
    m = parse("0.5.17", "ok.log").memory
    assert m.avail_at_start_gb == 139.09
    assert m.weights_gb == pytest.approx(0.10)
    assert m.draft_weights_gb == pytest.approx(0.05)
    assert m.avail_after_weights_gb == 138.94
    assert m.kv_cache_tokens == 12379562
    assert m.kv_cache_gb == pytest.approx(94.44)
    assert m.draft_kv_cache_tokens == 12379562
    assert m.draft_kv_cache_gb == pytest.approx(23.62)
    assert m.avail_after_kv_gb == 20.78
    assert m.graph_gb == pytest.approx(0.31 + 0.06)
    assert m.draft_graph_gb == pytest.approx(0.26 + 0.04 + 0.04)
    assert m.avail_end_gb == 19.45
    assert m.max_total_num_tokens == 12379562
    metrics = m.as_metrics()
    assert metrics["kv_cache_gb"] == pytest.approx(94.44)
    assert all(isinstance(v, float) for v in metrics.values())


def test_ok_resolved_args() -> None:
    args = parse("0.5.17", "ok.log").args
    assert args is not None
    assert args.mem_fraction_static == 0.85
    assert args.cuda_graph_max_bs == 16  # printed as cuda_graph_max_bs_decode=16 in 0.5.17
    assert args.max_running_requests == 16
    assert args.effective_max_running_requests == 16
    assert args.max_running_requests_reset_to is None
    assert (args.speculative_algorithm, args.speculative_num_steps) == ("EAGLE3", 3)
    assert (args.speculative_eagle_topk, args.speculative_num_draft_tokens) == (1, 4)
    assert args.tp_size == 1
    assert args.cuda_graph_bs == (1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16)  # from cuda_graph_config
    assert args.context_len == 4096
    assert args.raw["speculative_algorithm"] == "'EAGLE3'"
    assert args.raw["cuda_graph_config"].startswith("CudaGraphConfig(decode=PhaseConfig(")
    assert "attention_backend" in args.raw and "json_model_override_args" in args.raw
    params = args.as_params()
    assert params["mem_fraction_static"] == 0.85 and "raw" not in params and "cuda_graph_bs" not in params


def test_ok_graphs_weights_and_kv() -> None:
    report = parse("0.5.17", "ok.log")
    names = [(g.name, g.is_draft) for g in report.graphs]
    assert names == [
        ("target prefill", False),
        ("target verify", False),
        ("draft prefill", True),
        ("draft decode", True),
        ("draft extend", True),
    ]
    verify = report.graphs[1]
    assert (verify.avail_before_gb, verify.usage_gb, verify.avail_after_gb) == (19.85, 0.06, 19.78)
    assert verify.elapsed_s == 3.54 and verify.backend == "full" and verify.finished
    assert verify.batch_sizes == (1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16)
    assert len(report.graphs[0].num_tokens) == 58 and report.graphs[0].batch_sizes == ()
    assert [w.model_class for w in report.weight_loads] == ["LlamaForCausalLM", "LlamaForCausalLMEagle3"]
    assert [w.is_draft for w in report.weight_loads] == [False, True]
    assert report.weight_loads[0].elapsed_s == 0.17
    assert [(a.tokens, a.size_gb, a.is_draft) for a in report.kv_allocations] == [
        (12379562, 94.44, False),
        (12379562, 23.62, True),
    ]
    assert report.kv_allocations[0].dtype == "torch.bfloat16"


def test_ok_decode_lines_and_a_clean_stop() -> None:
    report = parse("0.5.17", "ok.log")
    assert report.decode_accept_lens[0] == 1.05
    assert len(report.decode_accept_lens) == 12
    assert set(report.decode_accept_lens[1:]) == {1.0}
    assert max(report.decode_gen_throughputs) == 2769.87
    assert report.retractions == 0 and not report.runtime_oom and not report.port_in_use
    assert report.failure is None  # SIGTERM, draining and kill_process_tree are not failures


def test_accept_lens_and_shutdown_noise() -> None:
    report = parse("0.5.17", "accept.log")
    assert report.decode_accept_lens and set(report.decode_accept_lens) == {4.0}
    # "Subprocess detokenizer ... crashed with exit code -9" comes after "Shutting down": no failure
    assert report.failure is None and report.nonfatal_errors == ()


def test_server_info_agrees_with_the_log_account() -> None:
    """The server's own /get_server_info account of the same run, against what the log said."""
    info = json.loads(read("0.5.17", "server-info.json"))
    state = info["internal_states"][0]
    usage = state["memory_usage"]
    memory = parse("0.5.17", "ok.log").memory
    assert usage["kvcache"] == pytest.approx(memory.kv_cache_gb, abs=0.01)  # target KV only
    assert usage["weight"] == pytest.approx(memory.weights_gb, abs=0.01)
    assert usage["token_capacity"] == memory.max_total_num_tokens
    assert usage["startup_available"] == pytest.approx(memory.avail_end_gb, abs=0.01)
    graph = usage["graph"]
    assert graph["prefill"] + graph["target_verify"] == pytest.approx(memory.graph_gb, abs=0.01)
    draft = graph["draft_prefill"] + graph["draft_decode"] + graph["draft_extend"]
    assert draft == pytest.approx(memory.draft_graph_gb, abs=0.01)
    assert state["avg_spec_accept_length"] == pytest.approx(1.0, abs=0.01)
    assert state["last_gen_throughput"] > 0 and info["version"] == "0.5.17"


def test_generate_fixture_keeps_meta_info() -> None:
    answers = json.loads(read("0.5.17", "generate.json"))
    meta = answers["accept"]["non_stream"]["response"]["meta_info"]
    assert meta["completion_tokens"] / meta["spec_verify_ct"] == pytest.approx(meta["spec_accept_length"])
    assert meta["spec_accept_length"] == 4.0
    last = answers["ok"]["stream"]["last_chunk"]["meta_info"]
    assert last["spec_verify_ct"] == 127 and last["completion_tokens"] == 128


# --- the real failures ---------------------------------------------------------------------------


def test_kv_oom_message_is_the_exception_line() -> None:
    report = parse("0.5.17", "kv-oom.log")
    assert report.failure is not None
    assert report.failure.message.startswith(
        "ValueError: Loaded weights leave no GPU memory for the KV cache"
    )
    assert report.memory.kv_cache_gb is None and report.memory.weights_gb == pytest.approx(0.10)
    assert "kv_cache_gb" not in report.memory.as_metrics()


def test_graph_oom_message_is_the_last_exception_of_the_chain() -> None:
    report = parse("0.5.17", "graph-oom.log")
    assert report.failure is not None
    assert report.failure.message.startswith("Exception: Capture cuda graph failed: CUDA out of memory.")
    assert report.failure.detail == "Tried to allocate 126.00 MiB"
    unfinished = report.graphs[-1]
    assert unfinished.name == "target verify" and not unfinished.finished and unfinished.usage_gb is None
    assert report.memory.kv_cache_tokens == 14422934


def test_graph_oom_in_graph_state_setup() -> None:
    report = parse("0.5.17", "graph-oom-0.994.log")
    assert report.failure is not None
    assert report.failure.message.startswith("torch.OutOfMemoryError: CUDA out of memory.")
    assert report.failure.detail == "Tried to allocate 32.00 MiB"


def test_cublas_alloc_failure_before_any_capture_is_a_target_graph_oom() -> None:
    report = parse("0.5.17", "graph-oom-cublas.log")
    assert report.graphs == ()  # no capture line was printed
    assert report.failure is not None
    assert "CUBLAS_STATUS_ALLOC_FAILED" in report.failure.message
    assert report.memory.avail_after_kv_gb == 0.18


# --- incremental feeding -------------------------------------------------------------------------


def test_ready_fires_once_at_the_ready_line() -> None:
    text = read("0.5.17", "ok.log")
    parser, events = feed_all(text)
    ready_at = index_of(text, "The server is fired up and ready to roll!")
    assert events == [(ready_at, LogEvent.READY)]
    report = parser.report()
    assert report.ready and report.ready_at == float(ready_at)
    assert report.error_line_at is None


@pytest.mark.parametrize(
    ("version", "name", "first_exception"),
    [
        ("0.5.17", "graph-oom.log", "torch.OutOfMemoryError"),
        ("0.5.17", "kv-oom.log", "ValueError: Loaded weights"),
        ("0.5.5", "kv-oom.log", "RuntimeError: Not enough memory"),
    ],
)
def test_failed_fires_once_at_the_first_exception_line(version: str, name: str, first_exception: str) -> None:
    text = read(version, name)
    parser, events = feed_all(text)
    assert events == [(index_of(text, first_exception), LogEvent.FAILED)]
    # the failure began where its traceback began
    assert parser.report().error_line_at == float(index_of(text, "Scheduler hit an exception"))


def test_runtime_oom_fires_at_the_logged_error_line() -> None:
    text = read("0.5.9", "runtime-oom.log")
    parser, events = feed_all(text)
    oom_at = index_of(text, "] Decode out of memory")
    assert events == [(index_of(text, "ready to roll"), LogEvent.READY), (oom_at, LogEvent.FAILED)]
    report = parser.report()
    assert report.runtime_oom and report.ready
    assert report.failure is not None
    assert report.failure.message == "Decode out of memory. Try to lower your batch size."
    assert report.failure.detail == "Try to allocate 128 tokens."
    assert report.error_line_at == float(oom_at)


def test_report_can_be_taken_mid_stream() -> None:
    text = read("0.5.17", "ok.log").splitlines()
    parser = LogParser()
    for line in text[: index_of("\n".join(text), "Memory pool end. avail mem=44.39")]:
        parser.feed(line)
    mid = parser.report()
    assert mid.last_stage is FailureStage.KV_ALLOCATION and not mid.ready
    assert mid.memory.kv_cache_gb == pytest.approx(94.44) and mid.memory.draft_kv_cache_gb is None


def test_carriage_returns_and_colour_codes() -> None:
    parser = LogParser()
    parser.feed("\x1b[1;33m'--cuda-graph-max-bs' is deprecated.\x1b[0m\n")
    bars = "Capturing batches (bs=1 avail_mem=1.00 GB):  50%|\rCapturing 100%|\r"
    line = bars + "[2026-01-01 00:00:00] Load weight begin. avail mem=80.00 GB"
    assert parser.feed(line) is LogEvent.NONE
    assert (
        parser.feed("\x1b[32m[2026-01-01 00:00:09] The server is fired up and ready to roll!\x1b[0m")
        is LogEvent.READY
    )
    assert parser.report().memory.avail_at_start_gb == 80.0


# --- versions ------------------------------------------------------------------------------------


def test_055_tp2_reset_to_48_and_rank0_only() -> None:
    report = parse("0.5.5", "ok.log")
    args = report.args
    assert args is not None
    assert args.max_running_requests_reset_to == 48
    assert args.max_running_requests == 48 and args.effective_max_running_requests == 48
    assert args.tp_size == 2 and args.cuda_graph_max_bs == 48
    assert args.cuda_graph_bs == (1, 2, 4, 8, 12, 16, 24, 32, 40, 48)
    assert args.raw["chat_template"].startswith("'{% for m in messages %}")  # commas and brackets inside
    assert args.raw["disaggregation_mode"] == "'null'"
    m = report.memory
    assert m.avail_after_weights_gb == 74.58  # TP0's figure, not TP1's 74.60
    assert m.kv_cache_gb == pytest.approx(66.48) and m.draft_kv_cache_gb == pytest.approx(2.08)
    assert m.avail_after_kv_gb == 7.62  # before the target graphs: the draft loads after them here
    assert m.graph_gb == pytest.approx(0.61) and m.draft_graph_gb == pytest.approx(0.51)
    assert m.draft_weights_gb == pytest.approx(0.84) and m.avail_end_gb == 2.99
    assert [g.name for g in report.graphs] == ["target", "draft", "draft extend"]
    assert report.graphs[0].elapsed_s == 4.69
    assert report.weight_loads[0].dtype == "torch.bfloat16" and report.weight_loads[0].elapsed_s is None
    assert report.decode_accept_lens == (2.61, 2.74, 2.70)
    assert (report.retractions, report.retraction_lines) == (3, 2)  # TP1's copies are not counted


def test_055_draft_graph_oom() -> None:
    report = parse("0.5.5", "draft-graph-oom.log")
    assert report.failure is not None
    assert report.failure.message.startswith("Exception: Capture cuda graph failed: CUDA out of memory.")
    assert report.failure.detail == "Tried to allocate 2.00 GiB"
    assert report.memory.graph_gb == pytest.approx(3.87) and report.memory.draft_graph_gb is None
    assert report.graphs[-1].name == "draft" and not report.graphs[-1].finished


def test_non_oom_capture_failure_is_a_crash() -> None:
    report = parse("0.5.9", "graph-crash.log")
    assert report.failure is not None
    assert report.failure.kind is FailureKind.CRASH and not report.failure.is_oom
    assert report.failure.message == (
        "Exception: Capture cuda graph failed: CUDA error: operation not permitted when stream is capturing"
    )


def test_059_elapsed_in_weight_line_and_retractions() -> None:
    report = parse("0.5.9", "ok.log")
    assert report.weight_loads[0].elapsed_s == 5.87
    assert report.weight_loads[0].dtype == "torch.bfloat16"
    assert report.retractions == 1 and report.decode_accept_lens == (3.12, 3.05)
    assert report.memory.draft_graph_gb == pytest.approx(0.44)


def test_0514_quant_string_mla_and_ep_prefix() -> None:
    report = parse("0.5.14", "ok.log")
    assert report.weight_loads[0].dtype == "quant=fp8, fmt=e4m3"
    assert report.weight_loads[1].dtype is None
    assert [(a.size_gb, a.is_draft) for a in report.kv_allocations] == [(47.41, False), (8.04, True)]
    m = report.memory
    assert (m.weights_gb, m.draft_weights_gb, m.avail_at_start_gb) == (8.85, 0.94, 78.20)
    assert m.graph_gb == pytest.approx(0.45 + 0.88) and m.draft_graph_gb == pytest.approx(0.12 + 0.10)
    assert [g.name for g in report.graphs] == [
        "target prefill",
        "target verify",
        "draft decode",
        "draft extend",
    ]
    assert report.graphs[1].batch_sizes == (1, 2, 4, 8, 16, 32, 48)
    args = report.args
    assert args is not None and args.cuda_graph_max_bs == 48 and args.max_running_requests_reset_to == 48
    assert args.raw["hisparse_config"] == "{'top_k': 2048, 'layers': [0, 1]}"
    assert report.decode_accept_lens == (3.41,)  # TP1 EP1's copy is left out


def test_0514_port_in_use_after_startup() -> None:
    report = parse("0.5.14", "port-in-use.log")
    assert report.port_in_use and not report.ready
    assert report.failure is not None and "[Errno 98]" in report.failure.message
    assert report.memory.graph_gb == pytest.approx(1.21)
    assert [g.name for g in report.graphs] == ["target decode"]


def test_0523_dict_server_args_va_upper_bound_and_dp_prefix() -> None:
    report = parse("0.5.23", "ok.log")
    args = report.args
    assert args is not None
    assert args.mem_fraction_static == 0.8 and args.tp_size == 2
    assert args.cuda_graph_max_bs == 32  # cuda_graph_max_bs_decode is None; the config holds it
    assert args.cuda_graph_bs == (1, 2, 4, 8, 16, 24, 32)
    assert args.raw["chat_template"] == "\"{{ 'a, b': [1, 2] }}\""
    assert args.raw["sampling_defaults"] == "'model'"
    assert all(a.virtual for a in report.kv_allocations)
    m = report.memory
    assert m.kv_cache_gb == pytest.approx(77.76) and m.draft_kv_cache_gb == pytest.approx(2.44)
    assert m.avail_after_kv_gb == 26.59 and m.avail_end_gb == 24.82
    assert report.graphs[1].name == "draft decode" and report.graphs[1].batch_sizes[-1] == 32
    assert report.decode_accept_lens == (3.20,)  # DP1 TP1 is another rank
    assert report.retractions == 4 and report.failure is None


def test_0523_draft_setup_oom_is_placed_by_its_frames() -> None:
    report = parse("0.5.23", "draft-graph-oom.log")
    assert [g.name for g in report.graphs] == ["target verify"]  # no draft capture line yet
    assert report.failure is not None and report.failure.detail == "Tried to allocate 64.00 MiB"


# --- small logs written here ---------------------------------------------------------------------

T = "[2026-01-01 00:00:00] "


def test_prefix_variants_read_the_same() -> None:
    body = [
        "Load weight begin. avail mem=80.00 GB",
        "Load weight end. type=LlamaForCausalLM, dtype=torch.float16, avail mem=64.00 GB, mem usage=16.00 GB",
        "KV Cache is allocated. #tokens: 1000, K size: 10.00 GB, V size: 10.00 GB",
        "Memory pool end. avail mem=44.00 GB",
    ]
    for tag in ("", " TP0", " TP0 EP0", " DP0 TP0", " DP0 PP0 TP0 EP0"):
        other = tag.replace("0", "1")
        lines = []
        for line in body:
            lines.append(f"[2026-01-01 00:00:00{tag}] {line}")
            if tag:  # another rank's copy, with other figures, must not count
                lines.append(f"[2026-01-01 00:00:00{other}] {line.replace('00 GB', '50 GB')}")
        m = parse_log("\n".join(lines)).memory
        assert (m.avail_at_start_gb, m.weights_gb, m.kv_cache_gb, m.avail_after_kv_gb) == (
            80.0,
            16.0,
            20.0,
            44.0,
        )


def test_another_ranks_traceback_is_a_failure() -> None:
    log = "\n".join(
        [
            T + "Load weight begin. avail mem=80.00 GB",
            "[2026-01-01 00:00:01 TP3] Scheduler hit an exception: Traceback (most recent call last):",
            '  File "/x/sglang/srt/model_executor/model_loader/loader.py", line 10, in load_model',
            "    model.load_weights(weights)",
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB.",
        ]
    )
    report = parse_log(log)
    assert report.failure is not None
    assert (report.failure.stage, report.failure.kind) == (FailureStage.WEIGHT_LOADING, FailureKind.OOM)


def test_retraction_lines_without_a_count_count_one_each() -> None:
    log = "\n".join(
        [T + "The server is fired up and ready to roll!"]
        + [T + "KV cache pool is full. Retract requests."] * 3
    )
    report = parse_log(log)
    assert (report.retractions, report.retraction_lines) == (3, 3) and report.failure is None


def test_request_errors_after_ready_are_not_fatal_until_the_server_dies() -> None:
    lines = [
        T + "The server is fired up and ready to roll!",
        T + "Error in request handler: Traceback (most recent call last):",
        '  File "/x/sglang/srt/entrypoints/http_server.py", line 5, in generate',
        "    raise ValueError('bad')",
        "ValueError: The input (40000 tokens) is longer than the model's context length (32768 tokens).",
        T + "Decode batch, #running-req: 1, #token: 10, accept len: 2.50, accept rate: 0.50, ",
    ]
    parser, events = feed_all("\n".join(lines))
    report = parser.report()
    assert events == [(0, LogEvent.READY)]
    assert report.failure is None and len(report.nonfatal_errors) == 1
    assert report.decode_accept_lens == (2.5,)
    assert (
        parser.feed(T + "Rank 0 scheduler is dead. Please check if there are relevant logs.")
        is LogEvent.FAILED
    )
    failure = parser.report().failure
    assert (
        failure is not None and failure.kind is FailureKind.CRASH and failure.stage is FailureStage.UNDER_LOAD
    )


def test_scheduler_crash_under_load() -> None:
    lines = [
        T + "The server is fired up and ready to roll!",
        T + "Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/x/sglang/srt/managers/scheduler.py", line 5, in event_loop_overlap',
        "AssertionError",
        T + "Received sigquit from a child process. It usually means the child failed.",
    ]
    report = parse_log("\n".join(lines))
    assert report.failure is not None
    assert (report.failure.stage, report.failure.kind, report.failure.message) == (
        FailureStage.UNDER_LOAD,
        FailureKind.CRASH,
        "AssertionError",
    )
    assert not report.runtime_oom


def test_crash_at_launch_from_an_uncaught_exception() -> None:
    log = "\n".join(
        [
            "Traceback (most recent call last):",
            '  File "/x/sglang/launch_server.py", line 7, in <module>',
            "    from sglang.srt.server_args import prepare_server_args",
            "ModuleNotFoundError: No module named 'flashinfer'",
        ]
    )
    report = parse_log(log)
    assert report.failure is not None
    assert (report.failure.stage, report.failure.kind) == (FailureStage.LAUNCH, FailureKind.CRASH)
    assert report.failure.message == "ModuleNotFoundError: No module named 'flashinfer'"
    assert report.args is None


def test_a_traceback_cut_short_is_a_crash_when_the_log_ends() -> None:
    parser = LogParser()
    parser.feed(T + "Load weight begin. avail mem=80.00 GB")
    parser.feed(T + "Scheduler hit an exception: Traceback (most recent call last):", now=5.0)
    parser.feed('  File "/x/sglang/srt/managers/scheduler.py", line 5, in __init__')
    assert parser.report().failure is None  # the exception line may still come
    assert parser.finish(now=9.0) is LogEvent.FAILED
    report = parser.report()
    assert report.failure is not None and report.failure.kind is FailureKind.CRASH
    assert report.failure.stage is FailureStage.WEIGHT_LOADING and report.error_line_at == 5.0


def test_an_oom_further_down_a_chain_reclassifies_a_crash() -> None:
    lines = [
        T + "Memory pool end. avail mem=1.00 GB",
        T + "Capture cuda graph begin. This can take up to several minutes. avail mem=0.90 GB",
        T + "Scheduler hit an exception: Traceback (most recent call last):",
        "RuntimeError: Triton Error [CUDA]: invalid argument",
        "",
        "During handling of the above exception, another exception occurred:",
        "",
        "Traceback (most recent call last):",
        "Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 20.00 MiB.",
        T + "Received sigquit from a child process. It usually means the child failed.",
    ]
    parser, events = feed_all("\n".join(lines))
    assert events == [(3, LogEvent.FAILED)]
    failure = parser.report().failure
    assert failure is not None
    assert (failure.stage, failure.kind) == (FailureStage.TARGET_GRAPH_CAPTURE, FailureKind.OOM)
    assert failure.detail == "Tried to allocate 20.00 MiB"


def test_graph_capture_failure_message_variants() -> None:
    old_end = T + "Capture cuda graph end. Time elapsed: 7.23 s. avail mem=0.53 GB. mem usage=0.93 GB."
    no_mem_end = T + "Capture draft extend cuda graph end. Time elapsed: 7.00 s"
    lines = [
        T + "Capture cuda graph begin. This can take up to several minutes. avail mem=1.46 GB",
        old_end,
        T + "Capture draft extend cuda graph begin (step 2). This can take up to... avail mem=0.53 GB",
        no_mem_end,
        T + "Capture Frozen-KV MTP draft cuda graph begin.",
        T + "Capture Frozen-KV MTP draft cuda graph end.",
    ]
    graphs = parse_log("\n".join(lines)).graphs
    assert [(g.name, g.is_draft, g.usage_gb, g.elapsed_s) for g in graphs] == [
        ("target", False, 0.93, 7.23),
        ("draft extend", True, None, 7.0),
        ("Frozen-KV MTP draft", True, None, None),
    ]


def test_labelled_pools_add_up_per_model() -> None:
    lines = [
        T + "Full KV Cache is allocated. dtype: fp8, #tokens: 100, K size: 20.00 GB, V size: 10.00 GB",
        T + "SWA KV Cache is allocated. dtype: fp8, #tokens: 10, KV size: 2.50 GB",
        T + "Memory pool end. avail mem=5.00 GB",
    ]
    report = parse_log("\n".join(lines))
    assert [a.label for a in report.kv_allocations] == ["Full", "SWA"]
    assert report.memory.kv_cache_gb == 32.5 and report.memory.kv_cache_tokens == 100
    assert report.memory.draft_kv_cache_gb is None


# --- the repr tokenizer --------------------------------------------------------------------------


def test_parse_mapping_handles_nesting_quotes_and_truncation() -> None:
    text = (
        "ServerArgs(a='x, y', b=\"it's (fine)\", c={'k': [1, 2], 'v': 'a=b'}, d=Phase(e=1, f=[3, 4]), "
        "g='esc\\'aped, still', h=None)"
    )
    raw = parse_mapping(text)
    assert raw == {
        "a": "'x, y'",
        "b": '"it\'s (fine)"',
        "c": "{'k': [1, 2], 'v': 'a=b'}",
        "d": "Phase(e=1, f=[3, 4])",
        "g": "'esc\\'aped, still'",
        "h": "None",
    }
    assert parse_mapping(raw["d"]) == {"e": "1", "f": "[3, 4]"}
    assert parse_mapping(raw["c"]) == {"k": "[1, 2]", "v": "'a=b'"}
    assert parse_mapping("ServerArgs(a=1, b=[1, 2") == {"a": "1", "b": "[1, 2"}  # a cut line keeps its head
    assert parse_mapping("not a repr") == {}
    assert parse_server_args("server_args={'tp_size': 2, 'x': (1, 2)}") == {"tp_size": "2", "x": "(1, 2)"}


def test_frameless_oom_after_the_pools_is_placed_by_its_text() -> None:
    """cuBLAS failing to allocate names the graph set-up by itself; a bare OOM there stays with the KV."""
    head = [
        T + "KV Cache is allocated. #tokens: 1000, K size: 10.00 GB, V size: 10.00 GB",
        T + "Memory pool end. avail mem=0.10 GB",
        T + "Scheduler hit an exception: Traceback (most recent call last):",
    ]
    cublas = parse_log(
        "\n".join(
            [
                *head,
                "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
            ]
        )
    )
    assert cublas.failure is not None
    assert (cublas.failure.stage, cublas.failure.kind) == (FailureStage.TARGET_GRAPH_CAPTURE, FailureKind.OOM)
    bare = parse_log(
        "\n".join([*head, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 MiB."])
    )
    assert bare.failure is not None
    assert (bare.failure.stage, bare.failure.kind) == (FailureStage.KV_ALLOCATION, FailureKind.OOM)
