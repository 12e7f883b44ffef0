"""The start-up memory account of one GPU, step by step, as SGLang walks it (pure functions).

Each step says how much memory it takes and what is left, so the server can print SGLang's lines and
the fake NVML can show the same figures; the first step that does not fit becomes the failure, at the
stage and in the words SGLang uses. Units are GiB (SGLang's "GB").

KV sizing follows SGLang: ``rest = avail_now - free_at_start * (1 - f)`` and ``tokens = rest / cell``.
From 0.5.14 both models are loaded first and share ``rest`` (target and draft cells together); up to
0.5.9 the target sizes its pool (and captures its graphs) before the draft loads, so the draft's
weights, its KV and its graphs all come out of the ``(1 - f)`` slack.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import StrEnum

from orchestrator.footprint.sglang_defaults import capture_sizes
from orchestrator.footprint.shape import kv_shards
from orchestrator.records import FailureStage
from orchestrator.sim.args import PREFILL_GRAPH_TOKENS, SimArgs
from orchestrator.sim.profile import SimProfile
from orchestrator.sim.tiers import load_tier_config

GIB = float(1 << 30)
MIB_PER_GIB = 1024.0


class StepKind(StrEnum):
    DIST_INIT = "dist_init"
    WEIGHTS = "weights"
    KV = "kv"
    EAGER_SETUP = "eager_setup"
    PREFILL_GATE = "prefill_gate"  # prefill graphs skipped: too little free memory
    GRAPH = "graph"


class OomKind(StrEnum):
    """How SGLang words the failure."""

    WEIGHTS = "weights"  # torch.OutOfMemoryError while loading weights
    KV_VALUE_ERROR = "kv_value_error"  # 0.5.14+: "Loaded weights leave no GPU memory for the KV cache"
    KV_RUNTIME_ERROR = "kv_runtime_error"  # <=0.5.9: "Not enough memory. Please try to increase ..."
    CUBLAS = "cublas"  # attention/cuBLAS set-up: CUBLAS_STATUS_ALLOC_FAILED
    RAW_OOM = "raw_oom"  # a graph runner's buffers: bare torch.OutOfMemoryError
    CAPTURE = "capture"  # during capture: "Exception: Capture cuda graph failed: CUDA out of memory"


@dataclass(frozen=True)
class MemStep:
    """One allocation of the start-up, as the log reports it."""

    kind: StepKind
    role: str  # "target" | "draft"
    name: str  # graph runner name ("target verify", "draft decode", ...) or ""
    avail_before: float
    usage: float
    real_s: float
    sizes: tuple[int, ...] = ()  # captured batch sizes (or prefill token counts)
    tokens_per_req: int = 1
    backend: str = ""
    kv_tokens: int = 0
    kv_k: float = 0.0
    kv_v: float = 0.0

    @property
    def avail_after(self) -> float:
        return self.avail_before - self.usage


@dataclass(frozen=True)
class MemFailure:
    """The step that did not fit."""

    kind: OomKind
    stage: FailureStage
    role: str
    name: str
    avail_gib: float  # free when it failed
    tried_mib: float = 0.0
    min_viable: float = 0.0  # KV failures: the smallest fraction that would have left a pool
    start_avail_gib: float = 0.0  # free when the failing runner began (its "begin" line)


@dataclass(frozen=True)
class StartupPlan:
    """Everything the start-up allocates, in order, and how it ends."""

    torch_total_gib: float
    free_at_start: float
    steps: tuple[MemStep, ...]
    failure: MemFailure | None
    kv_tokens: int
    max_running_requests: int
    capture_sizes: tuple[int, ...]
    graph_usage: dict[str, float] = field(default_factory=dict)

    @property
    def final_avail(self) -> float:
        return self.steps[-1].avail_after if self.steps else self.free_at_start

    def used_gib(self, upto: int | None = None) -> float:
        """What the process holds after ``upto`` steps (all by default), context included."""
        steps = self.steps if upto is None else self.steps[:upto]
        avail = steps[-1].avail_after if steps else self.free_at_start
        return self.torch_total_gib - avail


def torch_total_gib(profile: SimProfile) -> float:
    """What ``torch.cuda`` calls the capacity: NVML's total minus the driver's reserve."""
    return (profile.gpu_total_mib - profile.driver_reserve_mib) / MIB_PER_GIB


def kv_cells(profile: SimProfile, args: SimArgs) -> tuple[float, float]:
    """Bytes per token per GPU for the target and draft pools."""
    shrink = 0.5 if args.kv_cache_dtype.startswith("fp8") else 1.0
    target = profile.target_kv_bytes_per_token * shrink
    if profile.target_kv_sharded:
        target /= kv_shards(args.tp_size, profile.target_kv_heads)
    draft = profile.draft_kv_bytes_per_token * shrink if args.speculative else 0.0
    if profile.draft_kv_sharded:
        draft /= kv_shards(args.tp_size, profile.draft_kv_heads)
    return target, draft


def derived_max_running_requests(args: SimArgs, kv_tokens: int, context_len: int) -> int:
    """SGLang's request pool when the flag is unset: from the KV size, then at most half the tokens."""
    if args.max_running_requests is not None:
        return args.max_running_requests
    pool = min(max(int(kv_tokens / context_len * 512), 2048), 4096)
    return max(1, min(pool, kv_tokens // 2))


def _ceil_mib(gib: float) -> float:
    """torch reports allocations in 2 MiB blocks."""
    return max(2.0, math.ceil(gib * MIB_PER_GIB / 2.0) * 2.0)


class _Walker:
    """Walks the allocations in order; the first that does not fit stops the walk."""

    def __init__(self, avail: float) -> None:
        self.avail = avail
        self.steps: list[MemStep] = []
        self.failure: MemFailure | None = None

    def take(self, step: MemStep) -> bool:
        if step.usage > step.avail_before:
            return False
        self.steps.append(step)
        self.avail = step.avail_after
        return True

    def fail(self, failure: MemFailure) -> None:
        self.failure = failure


def _graph_runner(
    w: _Walker,
    profile: SimProfile,
    *,
    role: str,
    name: str,
    sizes: list[int],
    tokens_per_req: int,
    per_token: float,
    vocab: int,
    stage: FailureStage,
) -> bool:
    """A decode-style runner: its buffers, then the largest shape (the pool), then one cost per size."""
    max_bs = max(sizes)
    state = profile.graph_state_gib_per_bs * max_bs
    if state > w.avail:
        w.fail(MemFailure(OomKind.RAW_OOM, stage, role, name, w.avail, _ceil_mib(state), 0.0, w.avail))
        return False
    pool = per_token * max_bs * tokens_per_req
    usage = state + pool + profile.graph_gib_per_graph * len(sizes)
    real_s = profile.graph_capture_s_per_bs * len(sizes)
    step = MemStep(StepKind.GRAPH, role, name, w.avail, usage, real_s, tuple(sizes), tokens_per_req, "full")
    if w.take(step):
        return True
    # The capture allocates tensor after tensor; the logits of the largest shape are the biggest of them
    # (126 MiB for bs 512 x 4 tokens x 32000 vocab in bf16, as the H200 run showed). The one that no
    # longer fits is reported with what was still free.
    piece = max_bs * tokens_per_req * vocab * 2 / GIB
    w.fail(
        _capture_oom(stage, role, name, start=w.avail, free=w.avail - state, need=usage - state, piece=piece)
    )
    return False


def _capture_oom(
    stage: FailureStage, role: str, name: str, *, start: float, free: float, need: float, piece: float
) -> MemFailure:
    piece_mib = _ceil_mib(min(piece, need))
    free_mib = max(0.0, free * MIB_PER_GIB)
    left_mib = free_mib - math.floor(free_mib / piece_mib) * piece_mib
    return MemFailure(OomKind.CAPTURE, stage, role, name, left_mib / MIB_PER_GIB, piece_mib, 0.0, start)


def plan_startup(profile: SimProfile, args: SimArgs) -> StartupPlan:
    """The whole start-up memory walk for rank 0 (every rank is alike)."""
    total = torch_total_gib(profile)
    avail0 = total - profile.cuda_context_gib
    w = _Walker(avail0)
    w.take(MemStep(StepKind.DIST_INIT, "target", "", avail0, profile.dist_init_gib, 0.07))
    free_at_start = w.avail
    f = args.mem_fraction_static
    cell_t, cell_d = kv_cells(profile, args)
    spec = args.speculative
    old = profile.version_behaviour == "<=0.5.9"
    context_len = args.context_length or profile.context_len
    kv_tokens = 0
    mrr = args.max_running_requests or 0
    sizes: list[int] = []

    def done() -> StartupPlan:
        usage = {s.name.replace(" ", "_"): s.usage for s in w.steps if s.kind is StepKind.GRAPH}
        return StartupPlan(
            total, free_at_start, tuple(w.steps), w.failure, kv_tokens, mrr, tuple(sizes), usage
        )

    def weights(role: str, gib: float, real_s: float) -> bool:
        if w.take(MemStep(StepKind.WEIGHTS, role, "", w.avail, gib, real_s)):
            return True
        w.fail(MemFailure(OomKind.WEIGHTS, FailureStage.WEIGHT_LOADING, role, "", w.avail, _ceil_mib(gib)))
        return False

    def kv_pool(role: str, tokens: int, cell: float, overhead: float) -> MemStep:
        size = tokens * cell / GIB
        return MemStep(
            StepKind.KV, role, "", w.avail, size + overhead, profile.kv_alloc_s / (2 if spec else 1),
            kv_tokens=tokens, kv_k=size / 2, kv_v=size / 2,
        )  # fmt: skip

    kv_floor = profile.pool_overhead_gib / (args.tp_size if profile.kv_floor_sharded else 1)

    def kv_failure(available_after_weights: float) -> MemFailure:
        min_viable = 1 - (available_after_weights - kv_floor) / free_at_start
        kind = OomKind.KV_RUNTIME_ERROR if old else OomKind.KV_VALUE_ERROR
        return MemFailure(kind, FailureStage.KV_ALLOCATION, "target", "", w.avail, min_viable=min_viable)

    target_w = profile.target_weights_gib / args.tp_size
    if not weights("target", target_w, profile.weight_load_s):
        return done()
    draft_w = profile.draft_weights_gib / (args.tp_size if profile.draft_weights_sharded else 1)
    if spec and not old and not weights("draft", draft_w, profile.draft_weight_load_s):
        return done()

    # Target (and, from 0.5.14, draft) KV: the rest of the fraction, split by cell size.
    rest = w.avail - free_at_start * (1 - f)
    cells = cell_t + (cell_d if spec and not old else 0.0)
    if rest - kv_floor <= 0 or rest * GIB / cells < 1:
        w.fail(kv_failure(w.avail))
        return done()
    kv_tokens = int(rest * GIB // cells)
    if args.max_total_tokens is not None:
        kv_tokens = min(kv_tokens, args.max_total_tokens)
    w.take(kv_pool("target", kv_tokens, cell_t, profile.pool_overhead_gib))
    mrr = derived_max_running_requests(args, kv_tokens, context_len)
    sizes = capture_sizes(args.cuda_graph_max_bs, spec, mrr)

    def draft_kv() -> bool:
        step = kv_pool("draft", kv_tokens, cell_d, 0.0)
        if w.take(step):
            return True
        w.fail(
            MemFailure(
                OomKind.RAW_OOM, FailureStage.KV_ALLOCATION, "draft", "", w.avail, _ceil_mib(step.usage)
            )
        )
        return False

    if spec and not old and not draft_kv():
        return done()

    graphs = not args.disable_cuda_graph and bool(sizes)
    prefill_graphs = not args.disable_prefill_graph
    if graphs or prefill_graphs:
        setup = profile.eager_setup_gib + profile.eager_setup_gib_per_bs * (max(sizes) if sizes else 0)
        if not w.take(MemStep(StepKind.EAGER_SETUP, "target", "", w.avail, setup, 0.3)):
            w.fail(MemFailure(OomKind.CUBLAS, FailureStage.TARGET_GRAPH_CAPTURE, "target", "", w.avail))
            return done()
        if prefill_graphs and w.avail < profile.prefill_graph_min_free_gib:
            w.take(MemStep(StepKind.PREFILL_GATE, "target", "", w.avail, 0.0, 0.0))
            prefill_graphs = False

    def prefill_graph(role: str, gib: float, stage: FailureStage) -> bool:
        step = MemStep(
            StepKind.GRAPH, role, f"{role} prefill", w.avail, gib, profile.prefill_graph_capture_s,
            tuple(PREFILL_GRAPH_TOKENS), 1, "breakable",
        )  # fmt: skip
        if w.take(step):
            return True
        w.fail(_capture_oom(stage, role, step.name, start=w.avail, free=w.avail, need=gib, piece=0.25))
        return False

    tgt, drf = FailureStage.TARGET_GRAPH_CAPTURE, FailureStage.DRAFT_GRAPH_CAPTURE
    if prefill_graphs and not prefill_graph("target", profile.target_prefill_graph_gib, tgt):
        return done()
    if graphs:
        ok = _graph_runner(
            w, profile, role="target", name="target verify" if spec else "target decode", sizes=sizes,
            tokens_per_req=args.speculative_num_draft_tokens or 1,
            per_token=profile.target_graph_gib_per_token, vocab=profile.vocab_size, stage=tgt,
        )  # fmt: skip
        if not ok:
            return done()
    if not spec:
        return done()
    # <=0.5.9: the draft arrives only now, into whatever the target's fraction left over.
    if old and not (weights("draft", draft_w, profile.draft_weight_load_s) and draft_kv()):
        return done()
    if prefill_graphs and not prefill_graph("draft", profile.draft_prefill_graph_gib, drf):
        return done()
    if not graphs:
        return done()
    num_steps, topk, draft_tokens = (
        args.speculative_num_steps, args.speculative_eagle_topk, args.speculative_num_draft_tokens
    )  # fmt: skip
    assert num_steps is not None and topk is not None and draft_tokens is not None
    if num_steps > 1:
        ok = _graph_runner(
            w, profile, role="draft", name="draft decode", sizes=sizes, tokens_per_req=topk,
            per_token=profile.draft_graph_gib_per_token * num_steps, vocab=profile.vocab_size, stage=drf,
        )  # fmt: skip
        if not ok:
            return done()
    ok = _graph_runner(
        w, profile, role="draft", name="draft extend", sizes=sizes, tokens_per_req=draft_tokens,
        per_token=profile.draft_graph_gib_per_token, vocab=profile.vocab_size, stage=drf,
    )  # fmt: skip
    # --speculative-adaptive builds one more runtime state (its own CUDA graphs) per other tier.
    for steps in adaptive_tiers(args) if ok else ():
        if not _graph_runner(
            w, profile, role="draft", name=f"adaptive steps={steps}", sizes=sizes, tokens_per_req=steps + 1,
            per_token=profile.target_graph_gib_per_token, vocab=profile.vocab_size, stage=drf,
        ):  # fmt: skip
            break
    return done()


def adaptive_tiers(args: SimArgs) -> list[int]:
    """The tiers other than the launch's that an adaptive launch captures graphs for."""
    if not args.speculative_adaptive:
        return []
    config = load_tier_config(args.speculative_adaptive_config)
    tiers = sorted({s for e in config.values() for s in e["candidate_steps"]})
    return [s for s in tiers if s != args.speculative_num_steps]
