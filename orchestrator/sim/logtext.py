"""SGLang 0.5.17's log lines and tracebacks, character for character except numbers and times.

Every shape here was copied from the real H200 logs (``Load weight``, ``KV Cache is allocated``, the
``Capture ... CUDA graph`` pairs, ``Decode batch``, the failure tracebacks) so that a log parser tested
against the simulated server reads real SGLang the same way.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from typing import TextIO

SITE = "/usr/local/lib/python3.12/dist-packages/sglang"
TORCH = "/usr/local/lib/python3.12/dist-packages/torch"
ISSUE_URL = "https://github.com/sgl-project/sglang/issues/new/choose"


class SglangLog:
    """Writes lines with SGLang's prefix: ``[%Y-%m-%d %H:%M:%S] `` (``... TP0] `` for scheduler lines
    when TP > 1), flushing each one so a watcher sees it before the process can die."""

    def __init__(self, tp_size: int, stream: TextIO | None = None) -> None:
        self.tp_size = tp_size
        self.stream = stream if stream is not None else sys.stdout

    def line(self, msg: str, *, rank: bool = False) -> None:
        tag = " TP0" if rank and self.tp_size > 1 else ""
        self.stream.write(f"[{time.strftime('%Y-%m-%d %H:%M:%S')}{tag}] {msg}\n")
        self.stream.flush()

    def raw(self, text: str) -> None:
        self.stream.write(text if text.endswith("\n") else text + "\n")
        self.stream.flush()


def _frame(path: str, line: int, func: str, code: str) -> str:
    """One traceback frame with Python 3.12's carets under the called expression."""
    out = f'  File "{path}", line {line}, in {func}\n    {code}\n'
    for lead in ("= ", "return "):
        if lead in code:
            start = code.index(lead) + len(lead)
            out += " " * (4 + start) + "^" * (len(code) - start) + "\n"
            break
    return out


def _traceback(frames: Sequence[tuple[str, int, str, str]], error: str) -> str:
    """A traceback as Python prints it: the header, the frames (outermost first), then the error's lines."""
    return "Traceback (most recent call last):\n" + "".join(_frame(*f) for f in frames) + error


_SCHED = f"{SITE}/srt/managers/scheduler.py"
_RUNNER = f"{SITE}/srt/model_executor/model_runner.py"
_KV_CONF = f"{SITE}/srt/mem_cache/kv_cache_configurator.py"
_SCHEDULER_TOP = [
    (_SCHED, 4931, "run_scheduler_process", "scheduler = Scheduler("),
    (_SCHED, 498, "__init__", "self.init_model_worker()"),
]
_TARGET_GRAPHS = [
    (_SCHED, 985, "init_model_worker", "self.init_all_cuda_graphs()"),
    (_SCHED, 970, "init_all_cuda_graphs", "self.tp_worker.init_cuda_graphs()"),
    (f"{SITE}/srt/managers/tp_worker.py", 423, "init_cuda_graphs", "self.model_runner.init_cuda_graphs("),
    (f"{SITE}/srt/model_executor/model_runner.py", 944, "init_cuda_graphs", "capture = capture_cuda_graphs("),
    (
        f"{SITE}/srt/model_executor/model_runner_components/cuda_graph_setup.py",
        144,
        "capture_cuda_graphs",
        "decode = capture_decode_graph(model_runner=model_runner)",
    ),
    (
        f"{SITE}/srt/model_executor/model_runner_components/cuda_graph_setup.py",
        447,
        "capture_decode_graph",
        "runner = graph_runners[model_runner.device](model_runner)",
    ),
]
_DRAFT_GRAPHS = [
    (_SCHED, 985, "init_model_worker", "self.init_all_cuda_graphs()"),
    (_SCHED, 975, "init_all_cuda_graphs", "self.draft_worker.init_cuda_graphs()"),
    (f"{SITE}/srt/speculative/eagle_worker_v2.py", 312, "init_cuda_graphs", "self._capture_cuda_graphs()"),
    (
        f"{SITE}/srt/speculative/eagle_worker_v2.py",
        355,
        "_capture_cuda_graphs",
        "self.cuda_graph_runner = Device2DraftCudaGraphRunner[",
    ),
]
_DECODE_RUNNER = f"{SITE}/srt/model_executor/runner/decode_cuda_graph_runner.py"
_DRAFT_RUNNER = f"{SITE}/srt/speculative/eagle_draft_cuda_graph_runner.py"
_CAPTURE_INNER = [
    (_DECODE_RUNNER, 861, "capture", "self._capture_one_stream()"),
    (
        _DECODE_RUNNER,
        915,
        "_capture_one_stream",
        "self.capture_one_shape(bs, forward, stream_idx, variant_label)",
    ),
    (_DECODE_RUNNER, 1022, "capture_one_shape", "self.backend.capture_one("),
    (
        f"{SITE}/srt/model_executor/runner_backend/full_cuda_graph_backend.py",
        111,
        "capture_one",
        "out = forward_fn()",
    ),
    (_DECODE_RUNNER, 985, "run_once", "out = forward("),
    (f"{TORCH}/utils/_contextlib.py", 124, "decorate_context", "return func(*args, **kwargs)"),
    (f"{SITE}/srt/models/llama.py", 580, "forward", "return self.logits_processor("),
    (f"{TORCH}/nn/modules/module.py", 1779, "_wrapped_call_impl", "return self._call_impl(*args, **kwargs)"),
    (f"{TORCH}/nn/modules/module.py", 1790, "_call_impl", "return forward_call(*args, **kwargs)"),
    (
        f"{SITE}/srt/layers/logits_processor.py",
        454,
        "forward",
        "logits = self._get_logits(pruned_states, lm_head, logits_metadata)",
    ),
    (
        f"{SITE}/srt/layers/logits_processor.py",
        725,
        "_get_logits",
        "logits = self._compute_lm_head(hidden_states, lm_head, embedding_bias)",
    ),
    (f"{SITE}/srt/layers/logits_processor.py", 785, "_compute_lm_head", "logits = torch.matmul("),
]

POSSIBLE_SOLUTIONS = (
    "Possible solutions:\n"
    "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n"
    "2. set --cuda-graph-max-bs-decode to a smaller value (e.g., 16)\n"
    "3. disable decode CUDA graph by --cuda-graph-backend-decode=disabled. "
    "(Not recommended. Huge performance loss)\n"
    f"Open an issue on GitHub {ISSUE_URL} \n"
)


def torch_oom(
    *,
    tried_mib: float,
    total_gib: float,
    free_mib: float,
    in_use_gib: float,
    context_gib: float,
    graphs: bool,
) -> str:
    """PyTorch's out-of-memory sentence, with SGLang-side numbers."""
    unallocated_mib = 59.55 if graphs else 16.14
    allocated = max(0.0, in_use_gib - context_gib - unallocated_mib / 1024)
    pools = "with 18.00 MiB allocated in private pools (e.g., CUDA Graphs), and " if graphs else "and "
    return (
        f"CUDA out of memory. Tried to allocate {tried_mib:.2f} MiB. GPU 0 has a total capacity of "
        f"{total_gib:.2f} GiB of which {free_mib:.2f} MiB is free. Including non-PyTorch memory, this "
        f"process has {in_use_gib:.2f} GiB memory in use. Of the allocated memory {allocated:.2f} GiB is "
        "allocated by "
        f"PyTorch, {pools}{unallocated_mib:.2f} MiB is reserved by PyTorch but unallocated. If reserved but "
        "unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid "
        "fragmentation.  See documentation for Memory Management  "
        "(https://docs.pytorch.org/docs/stable/notes/cuda.html#optimizing-memory-usage-with-pytorch-cuda-alloc-conf)"
    )


def capture_failed(oom: str, *, draft: bool) -> str:
    """The wrapped capture failure: the OOM inside the capture, then SGLang's ``Exception`` and hints."""
    runner, outer = _graph_runner(draft)
    inner = [(runner, 415, "__init__", "self.capture()"), *_CAPTURE_INNER]
    return (
        _traceback(inner, f"torch.OutOfMemoryError: {oom}\n")
        + "\nDuring handling of the above exception, another exception occurred:\n\n"
        + _traceback(
            [*outer, (runner, 417, "__init__", "raise Exception(")],
            f"Exception: Capture cuda graph failed: {oom}\n{POSSIBLE_SOLUTIONS}\n",
        )
    )


def _graph_runner(draft: bool) -> tuple[str, list[tuple[str, int, str, str]]]:
    """The graph runner a target's or a draft's capture runs in, and the frames down to its creation."""
    if draft:
        return _DRAFT_RUNNER, _SCHEDULER_TOP + _DRAFT_GRAPHS
    return _DECODE_RUNNER, _SCHEDULER_TOP + _TARGET_GRAPHS


def runner_setup_oom(oom: str, *, draft: bool) -> str:
    """A bare OutOfMemoryError from a graph runner's buffers (``init_cuda_graph_state``)."""
    runner, outer = _graph_runner(draft)
    frames = [
        *outer,
        (runner, 318, "__init__", "self.attn_backend.init_cuda_graph_state(self.max_bs, self.max_num_token)"),
        (
            f"{SITE}/srt/layers/attention/triton_backend.py",
            969,
            "init_cuda_graph_state",
            "self.cuda_graph_attn_logits = torch.zeros(",
        ),
    ]
    return _traceback(frames, f"torch.OutOfMemoryError: {oom}\n")


def cublas_failed() -> str:
    """The attention backend's set-up, before any capture, found no memory for cuBLAS."""
    frames = _SCHEDULER_TOP + _TARGET_GRAPHS + [
        (_DECODE_RUNNER, 296, "__init__", "self.cublas_handle = torch.cuda.current_blas_handle()"),
    ]  # fmt: skip
    return _traceback(
        frames, "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`\n"
    )


_KV_FRAMES = [
    (_SCHED, 981, "init_model_worker", "self.init_memory_pools()"),
    (_SCHED, 953, "init_memory_pools", "self.init_target_memory_pool()"),
    (_SCHED, 949, "init_target_memory_pool", "self.tp_worker.alloc_memory_pool()"),
    (
        f"{SITE}/srt/managers/tp_worker.py",
        399,
        "alloc_memory_pool",
        "self.model_runner.alloc_memory_pool(memory_pool_config)",
    ),
    (
        f"{SITE}/srt/model_executor/model_runner.py",
        775,
        "alloc_memory_pool",
        "result = self.kv_cache_configurator.configure(",
    ),
    (
        f"{SITE}/srt/mem_cache/kv_cache_configurator.py",
        247,
        "configure",
        "config = self._resolve_memory_pool_config(pre_model_load_memory)",
    ),
    (
        f"{SITE}/srt/mem_cache/kv_cache_configurator.py",
        1782,
        "_resolve_memory_pool_config",
        "available_bytes = self._profile_available_bytes(pre_model_load_memory)",
    ),
]


def kv_value_error(fraction: float, min_viable: float) -> str:
    """0.5.14+: the KV pool would be empty (or negative) once the weights are in."""
    above = max(0.001, -(-round(min_viable * 1000, 6) // 1) / 1000)  # round up to 3 decimals
    frames = _SCHEDULER_TOP + _KV_FRAMES + [
        (f"{_KV_CONF}", 1647, "_profile_available_bytes", "raise ValueError("),
    ]  # fmt: skip
    return _traceback(
        frames,
        f"ValueError: Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static="
        f"{fraction:g}. Raise --mem-fraction-static above {above:.3f} (minimum viable = 1 - available/pre = "
        f"{min_viable:.4f}). If using speculative decoding, draft weights are now counted.\n",
    )


def kv_runtime_error(fraction: float) -> str:
    """Up to 0.5.9: the target's pool is sized before the draft, and comes out empty."""
    frames = [
        *_SCHEDULER_TOP,
        (_SCHED, 981, "init_model_worker", "self.tp_worker = TpModelWorker("),
        (f"{SITE}/srt/managers/tp_worker.py", 247, "__init__", "self.model_runner = ModelRunner("),
        (_RUNNER, 372, "__init__", "self.initialize(min_per_gpu_memory)"),
        (f"{SITE}/srt/model_executor/model_runner.py", 471, "initialize", "self.init_memory_pool("),
        (f"{SITE}/srt/model_executor/model_runner.py", 1876, "init_memory_pool", "raise RuntimeError("),
    ]  # fmt: skip
    return _traceback(
        frames,
        "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. Current value: "
        f"{fraction}\n",
    )


def weights_oom(oom: str) -> str:
    frames = [
        *_SCHEDULER_TOP,
        (_SCHED, 981, "init_model_worker", "self.tp_worker = TpModelWorker("),
        (_RUNNER, 860, "load_model", "self.model = self.loader.load_model("),
        (f"{SITE}/srt/model_loader/loader.py", 683, "load_model", "model = _initialize_model("),
    ]  # fmt: skip
    return _traceback(frames, f"torch.OutOfMemoryError: {oom}\n")


def fmt_list(values: Sequence[int]) -> str:
    return "[" + ", ".join(str(v) for v in values) + "]"


def prefill_line(
    *, seqs: int, tokens: int, usage: float, running: int, queued: int, graph: bool, throughput: float
) -> str:
    return (
        f"Prefill batch, #new-seq: {seqs}, #new-token: {tokens}, #cached-token: 0, token usage: {usage:.2f}, "
        f"#running-req: {running}, #queue-req: {queued}, #pending-token: 0, cuda graph: {graph}, "
        f"input throughput (token/s): {throughput:.2f}"
    )


def decode_line(
    *,
    running: int,
    tokens: int,
    usage: float,
    accept_len: float | None,
    accept_rate: float | None,
    graph: bool,
    throughput: float,
    queued: int,
) -> str:
    spec = (
        f"accept len: {accept_len:.2f}, accept rate: {accept_rate:.2f}, "
        if accept_len is not None and accept_rate is not None
        else ""
    )
    return (
        f"Decode batch, #running-req: {running}, #token: {tokens}, token usage: {usage:.2f}, {spec}"
        f"cuda graph: {graph}, gen throughput (token/s): {throughput:.2f}, #queue-req: {queued}"
    )


def retract_line(reqs: int, gained: int) -> str:
    return f"KV cache pool is full. Retract requests. #retracted_reqs: {reqs}, #new_tokens_gained: {gained}"


# Where 0.5.17 ran out of memory serving (the llama8b-live fixture, trial 2): the draft's extend of a new
# prefill, in its MLP, with the scheduler's event loop above it.
_SERVING = [
    (_SCHED, 4947, "run_scheduler_process", "scheduler.run_event_loop()"),
    (_SCHED, 1662, "run_event_loop", "dispatch_event_loop(self)"),
    (_SCHED, 1763, "event_loop_overlap", "batch_result = self.run_batch(batch)"),
    (_SCHED, 3594, "run_batch", "batch_result = self.model_worker.forward_batch_generation("),
    (f"{SITE}/srt/speculative/eagle_worker_v2.py", 811, "_draft_extend_for_prefill",
     "logits_output = self.draft_runner.forward(forward_batch).logits_output"),
    (_RUNNER, 1427, "forward", "output = self._forward_raw("),
    (f"{SITE}/srt/layers/activation.py", 145, "forward_cuda",
     "out = torch.empty(output_shape, dtype=x.dtype, device=x.device)"),
]  # fmt: skip


def serving_oom(oom: str) -> str:
    """An out-of-memory error in a forward while serving: the scheduler dies, the server still listens."""
    return _traceback(_SERVING, f"torch.OutOfMemoryError: {oom}\n")


SIGQUIT_LINE = "SIGQUIT received. signum=None, frame=None. It usually means one child failed."
CRASH_SLEEP_LINE = "Sleeping 5 seconds before crash diagnostics to let GPU activity settle."
NO_SCHEDULER_LINE = "No live scheduler processes found; skipping py-spy and CUDA coredump."
