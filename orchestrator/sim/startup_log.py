"""The simulated server's start-up lines: each start-up step's lines as SGLang logs them (`log_step`), the
line a CUDA graph capture begins with, and the traceback a step that did not fit ends the start-up with.

Text only, and the waits between a step's lines: what the steps are and what they hold comes from
`sim.memory.plan_startup`; the server writes the GPU memory and dies.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from orchestrator.records import FailureStage
from orchestrator.sim import logtext
from orchestrator.sim.args import PREFILL_GRAPH_TOKENS, SimArgs
from orchestrator.sim.logtext import SglangLog
from orchestrator.sim.memory import MemFailure, MemStep, OomKind, StartupPlan, StepKind
from orchestrator.sim.profile import SimProfile


async def log_step(
    log: SglangLog,
    profile: SimProfile,
    args: SimArgs,
    plan: StartupPlan,
    step: MemStep,
    wait: Callable[[float], Awaitable[None]],
) -> None:
    """Log one start-up step as SGLang does, waiting (`wait`: the server's scaled sleep) as it takes."""
    p = profile
    if step.kind is StepKind.DIST_INIT:
        log.line("Init torch distributed begin.", rank=True)
        await wait(step.real_s)
        log.line(
            f"Init torch distributed ends. elapsed={step.real_s:.2f} s, mem usage={step.usage:.2f} GB",
            rank=True,
        )
    elif step.kind is StepKind.WEIGHTS:
        if step.role == "draft":
            log.line("SPECULATIVE_MOE_RUNNER_BACKEND is not initialized, using auto backend", rank=True)
            log.line("SPECULATIVE_MOE_A2A_BACKEND is not initialized, using none backend", rank=True)
            log.line("Init torch distributed begin.", rank=True)
            log.line("Init torch distributed ends. elapsed=0.00 s, mem usage=0.00 GB", rank=True)
        log.line(f"Load weight begin. avail mem={step.avail_before:.2f} GB", rank=True)
        await wait(step.real_s)
        arch = p.draft_arch if step.role == "draft" else p.target_arch
        log.line(
            f"Load weight end. elapsed={step.real_s:.2f} s, type={arch}, "
            f"avail mem={step.avail_after:.2f} GB, mem usage={step.usage:.2f} GB.",
            rank=True,
        )
    elif step.kind is StepKind.KV:
        await wait(step.real_s)
        dtype = {"fp8_e4m3": "torch.float8_e4m3fn", "fp8_e5m2": "torch.float8_e5m2"}.get(
            args.kv_cache_dtype, "torch.bfloat16"
        )
        mla = step.role == "target" and p.target_kv_layout == "mla"
        sizes = (
            f"KV size: {step.kv_k + step.kv_v:.2f} GB"
            if mla
            else f"K size: {step.kv_k:.2f} GB, V size: {step.kv_v:.2f} GB"
        )
        log.line(f"KV Cache is allocated. dtype: {dtype}, #tokens: {step.kv_tokens}, {sizes}", rank=True)
        log.line(f"Memory pool end. avail mem={step.avail_after:.2f} GB", rank=True)
    elif step.kind is StepKind.PREFILL_GATE:
        log.line(
            f"Disabling auto-selected prefill CUDA graph: only {step.avail_before:.2f} GiB is free after "
            "model/KV/eager-buffer allocation; at least "
            f"{p.prefill_graph_min_free_gib:.2f} GiB is required for capture. Set an explicit prefill "
            "CUDA graph backend to override this safety gate.",
            rank=True,
        )
    elif step.kind is StepKind.GRAPH and step.name.startswith("adaptive"):
        await wait(step.real_s)
        tier = step.name.split(" ", 1)[1]
        log.line(
            f"Built adaptive runtime state {tier}: elapsed={step.real_s:.2f}s, mem={step.usage:.2f}GB",
            rank=True,
        )
    elif step.kind is StepKind.GRAPH:
        log.line(capture_begin(args, plan, step.name, step.avail_before), rank=True)
        await wait(step.real_s)
        log.line(
            f"Capture {step.name} CUDA graph end. elapsed={step.real_s:.2f} s, "
            f"mem usage={step.usage:.2f} GB, avail mem={step.avail_after:.2f} GB.",
            rank=True,
        )


def capture_begin(args: SimArgs, plan: StartupPlan, name: str, avail: float) -> str:
    """The line a CUDA graph capture begins with: its backend, its tokens per request and batch sizes."""
    if name.endswith("prefill"):
        return (
            f"Capture {name} CUDA graph begin. backend=breakable, "
            f"num_tokens={logtext.fmt_list(PREFILL_GRAPH_TOKENS)}, avail mem={avail:.2f} GB"
        )
    a = args
    per_req = {
        "target verify": a.speculative_num_draft_tokens,
        "draft decode": a.speculative_eagle_topk,
        "draft extend": a.speculative_num_draft_tokens,
    }
    tokens = per_req.get(name) or 1
    return (
        f"Capture {name} CUDA graph begin. backend=full, num_tokens_per_req={tokens}, "
        f"bs={logtext.fmt_list(plan.capture_sizes)}, avail mem={avail:.2f} GB"
    )


def failure_traceback(args: SimArgs, profile: SimProfile, plan: StartupPlan, f: MemFailure) -> str:
    """The traceback SGLang's scheduler raises for a start-up step that did not fit (`MemFailure`)."""
    p = profile
    total = plan.torch_total_gib
    oom = logtext.torch_oom(
        tried_mib=f.tried_mib,
        total_gib=total,
        free_mib=f.avail_gib * 1024,
        in_use_gib=total - f.avail_gib,
        context_gib=p.cuda_context_gib + p.dist_init_gib,
        graphs=f.kind is OomKind.CAPTURE,
    )
    draft = f.role == "draft"
    if f.kind is OomKind.KV_VALUE_ERROR:
        return logtext.kv_value_error(args.mem_fraction_static, f.min_viable)
    if f.kind is OomKind.KV_RUNTIME_ERROR:
        return logtext.kv_runtime_error(args.mem_fraction_static)
    if f.kind is OomKind.CUBLAS:
        return logtext.cublas_failed()
    if f.kind is OomKind.CAPTURE:
        return logtext.capture_failed(oom, draft=draft)
    if f.kind is OomKind.RAW_OOM and f.stage is not FailureStage.KV_ALLOCATION:
        return logtext.runner_setup_oom(oom, draft=draft)
    return logtext.weights_oom(oom)
