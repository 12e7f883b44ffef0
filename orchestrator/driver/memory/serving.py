"""Serving memory: the peak a ready server's forwards take under load, out of what start-up left free.

Start-up is not the whole account. Once ready, each forward allocates transient buffers outside the KV
pools and the CUDA-graph pools, and a server launched at the highest fraction that starts can run out of
memory under load (on the H200 the 8B shape at fraction 0.98, graph bs 32, served s1k2d2 at concurrency
32 with 3.73 GB free after start-up, and ran out with s4k2d8 and 3.29 GB free, twice: a
``torch.OutOfMemoryError`` asking 176 MiB in the draft's prefill extend, then a Triton out of memory in
a verify; tests/fixtures/sglang/0.5.17/llama8b-live and llama8b-h200). Per GPU, in GiB:

    peak = runtime + fragmentation + prefill + verify + draft

- ``prefill``: the largest prefill batch, ``min(chunked_prefill_size, running x input_len)`` prompt
  tokens, each holding its MLP activations (``gate_up`` and its activated half, ``3 x intermediate / tp``
  entries), the hidden state and residual (``2 x hidden``) and, under EAGLE-3, the three auxiliary hidden
  states the draft reads (``3 x hidden``), in the model's dtype; and the draft's own MLP activations as
  it extends over the same tokens (``3 x draft intermediate / tp``). These two draft terms only for a
  speculative server: the baseline holds neither. The OOM above asked for exactly one
  such activation: 6400 prompt tokens x 14336 x 2 bytes = 175 MiB, rounded to the allocator's 2 MiB; the
  Qwen3-32B shape's launch at 0.97 (s4k4d16, tests/fixtures/sglang/0.5.17/qwen32b-serving) asked 400 MiB
  in its draft's MLP, 8192 tokens x 25600 x 2 bytes. Before the draft's term the prediction had that
  launch serving (4.71 GiB of peak against 4.81 free); the Llama shapes' draft term is the same on every
  launch, so their fit absorbed it into the runtime constant.
- ``verify``: running requests x draft tokens (the requests themselves without speculation, where the
  forward is a plain decode step and is printed as ``decode``), each
  scoring the whole vocabulary in fp32 (the logits are gathered whole on every GPU) plus the sampling's
  two copies (temperature-scaled logits and their softmax): ``3 x 4 x vocab`` bytes. Where the running
  requests exceed the captured graph batch the verify runs eagerly, and its tokens hold the prefill's
  activations too.
- ``draft``: one draft step's batch x top-k tokens over the draft's vocabulary, fp32 logits and their
  softmax (``2 x 4 x draft vocab``).
- ``fragmentation``: what the caching allocator held but could not hand out when the forward failed:
  the OOM message's "380.10 MiB is reserved by PyTorch but unallocated".
- ``runtime``: what serving takes that no tensor explains (kernels loaded on the first eager forwards,
  cuBLAS and Triton workspaces: the same OOM message counts 2.94 GiB of non-PyTorch memory, against 0.71
  before loading). It is the one constant fitted on serving logs (`fit_runtime`): above what the failing
  launch had used when it failed, below what every launch that served left free; the middle of that
  interval, so that neither side is decided by a few tens of MiB of prediction error.

The forwards are summed, not maxed: SGLang's overlap scheduler keeps a batch's outputs (a verify's
probabilities) alive while the next forward (a prefill) runs, and the real OOM came in a prefill right
after a wave of verifies. A simulated node states its own rule instead (`SimProfile.serving_gib_per_token`:
the largest forward's tokens times a cost per token, nothing else), so the prior predicts what it does.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum

from orchestrator.footprint.sglang_defaults import default_graph_settings
from orchestrator.footprint.shape import GIB, ModelShape
from orchestrator.records import ServerConfig

SAMPLING_COPIES = 2  # besides the fp32 logits: temperature-scaled logits and their softmax
DRAFT_COPIES = 1  # besides the draft's fp32 logits: the softmax its top-k is taken from
# The OOM message of the 8B shape's launch at 0.98 (llama8b-live trial 2): "380.10 MiB is reserved by
# PyTorch but unallocated" when a 176 MiB block could not be found.
FRAGMENTATION_GIB = 380.10 / 1024
# `fit_runtime` on the H200's serving logs (tests/driver/memory/test_serving_peak.py refits it and holds
# this value to the fit): the interval (1.070, 1.363] GiB, its middle. The lower end is the 8B shape's
# torch OOM (3.45 GiB used when it failed, llama8b-live trial 2), the upper end s3k1d4 at 0.98 serving
# concurrency 32 with 3.55 GiB free (llama8b-serving trial 0). Fitted on the 8B shape's logs alone it is
# the same (1.214), and it decides the four Qwen3-32B launches as they went (qwen32b-serving).
RUNTIME_GIB = 1.216


@dataclass(frozen=True)
class ServingCosts:
    """What a forward allocates while serving, per GPU: bytes per token of each kind of forward."""

    prefill_bytes_per_token: float  # a prompt token's activations (also an eager verify's tokens)
    verify_bytes_per_token: float  # a verified token's logits and the sampling's copies
    draft_bytes_per_token: float  # a draft step's token (batch x top-k)
    runtime_gib: float = RUNTIME_GIB
    fragmentation_gib: float = FRAGMENTATION_GIB
    # What speculation adds to a prompt token: EAGLE-3's auxiliary hidden states and the draft's MLP as it
    # extends. A server without speculation holds neither: charged them, the Mistral-Small-24B shape's
    # baseline at 0.97 was predicted 1.73 GiB short where it served (mistral24b-boundary).
    draft_prefill_bytes_per_token: float = 0.0
    summed: bool = True  # False: only the largest forward counts (a simulated node's rule)
    source: str = ""


def serving_costs_for(target: ModelShape, draft: ModelShape | None, tp: int) -> ServingCosts:
    """The costs from both models' config.json shapes, at tp."""
    intermediate = max(target.intermediate, target.moe_intermediate)
    prefill = target.dtype_bytes * (3 * intermediate / tp + 2 * target.hidden)
    draft_prefill = 0.0
    if draft is not None and draft.eagle3:
        draft_prefill += target.dtype_bytes * 3 * target.hidden
    if draft is not None:
        # The draft extends over the same prompt tokens with its own MLP: the Qwen3-32B shape's draft
        # (intermediate 25600) ran out asking 400 MiB there, 8192 tokens x 25600 x bf16, exactly.
        draft_prefill += draft.dtype_bytes * 3 * max(draft.intermediate, draft.moe_intermediate) / tp
    d = draft or target
    return ServingCosts(
        prefill_bytes_per_token=prefill,
        verify_bytes_per_token=4.0 * target.vocab * (1 + SAMPLING_COPIES),
        draft_bytes_per_token=4.0 * (d.draft_vocab or d.vocab) * (1 + DRAFT_COPIES),
        draft_prefill_bytes_per_token=draft_prefill,
        source="config.json",
    )


def simulated_costs(gib_per_token: float) -> ServingCosts | None:
    """A simulated node's rule: a forward of n tokens needs n x ``gib_per_token``; 0: none modelled."""
    if gib_per_token <= 0:
        return None
    per_token = gib_per_token * GIB
    return ServingCosts(per_token, per_token, 0.0, 0.0, 0.0, summed=False, source="simulated profile")


@dataclass(frozen=True)
class ServingLoad:
    """The workload's heaviest moment: every request of the highest concurrency running."""

    concurrency: int
    input_len: int | None  # None: assume a full prefill chunk
    chunked_prefill_size: int

    def running(self, config: ServerConfig) -> int:
        return min(self.concurrency, config.max_running_requests)

    def prefill_tokens(self, config: ServerConfig) -> int:
        if self.input_len is None:
            return self.chunked_prefill_size
        return min(self.chunked_prefill_size, self.running(config) * self.input_len)


@dataclass(frozen=True)
class ServingWorkload:
    """What a sweep's workload asks of the forwards: its highest concurrency and prompt length, and the
    chunked prefill size it runs with (None: SGLang's default for the GPU's memory)."""

    concurrency: int
    input_len: int | None
    chunked_prefill_size: int | None = None

    def load(self, gpu_total_mib: float, tp: int) -> ServingLoad:
        chunk = self.chunked_prefill_size or default_graph_settings(gpu_total_mib, tp)[0]
        return ServingLoad(self.concurrency, self.input_len, chunk)


@dataclass(frozen=True)
class ServingPeak:
    """The predicted peak and its terms (GiB), with the token counts they come from."""

    running: int
    prefill_tokens: int
    verify_tokens: int
    draft_tokens: int
    prefill_gib: float
    verify_gib: float
    draft_gib: float
    runtime_gib: float
    fragmentation_gib: float
    total_gib: float

    def terms(self) -> str:
        # Without speculation (no draft) the "verify" forward is a plain decode step: one token per running
        # request, its logits the same cost per token. It is named as what it is.
        forward = "verify" if self.draft_tokens else "decode"
        text = (
            f"runtime {self.runtime_gib:.2f} + fragmentation {self.fragmentation_gib:.2f} + prefill of "
            f"{self.prefill_tokens} tokens {self.prefill_gib:.2f} + {forward} of {self.verify_tokens} tokens "
            f"{self.verify_gib:.2f}"
        )
        # A server without speculation has no draft: no term of 0 tokens for it.
        return text + (
            f" + draft of {self.draft_tokens} tokens {self.draft_gib:.2f}" if self.draft_tokens else ""
        )


def serving_peak(costs: ServingCosts, config: ServerConfig, load: ServingLoad) -> ServingPeak:
    running = load.running(config)
    prefill_tokens = load.prefill_tokens(config)
    per_request = (config.speculative_num_draft_tokens or 1) if config.speculative else 1
    verify_tokens = running * per_request
    draft_tokens = running * (config.speculative_eagle_topk or 1) if config.speculative else 0
    per_prompt_token = costs.prefill_bytes_per_token
    if config.speculative:
        per_prompt_token += costs.draft_prefill_bytes_per_token
    prefill = prefill_tokens * per_prompt_token / GIB
    verify_bytes = costs.verify_bytes_per_token
    if costs.summed and running > config.cuda_graph_max_bs:
        verify_bytes += per_prompt_token  # beyond the captured batch: an eager forward
    verify = verify_tokens * verify_bytes / GIB
    draft = draft_tokens * costs.draft_bytes_per_token / GIB
    transient = prefill + verify + draft if costs.summed else max(prefill, verify, draft)
    fixed = costs.runtime_gib + costs.fragmentation_gib
    return ServingPeak(
        running,
        prefill_tokens,
        verify_tokens,
        draft_tokens,
        prefill,
        verify,
        draft,
        costs.runtime_gib,
        costs.fragmentation_gib,
        fixed + transient,
    )


def serving_ceiling(left_at: Callable[[float], float | None], peak_gib: float) -> float:
    """The highest fraction whose start-up leaves ``peak_gib`` free (0 when none does), given what is
    left at a fraction; what is left falls as the fraction rises (bisection, as for the graph ceiling)."""

    def room(f: float) -> bool:
        left = left_at(f)
        return left is not None and left >= peak_gib

    lo, hi = 0.0, 0.9999
    if room(hi):
        return hi
    if not room(lo):
        return 0.0
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if room(mid) else (lo, mid)
    return lo


# -- fitting the runtime constant on serving logs ------------------------------------------------------


class Served(StrEnum):
    OK = "ok"
    OOM = "oom"


@dataclass(frozen=True)
class ServingObservation:
    """One launch under load: what start-up left, what the forwards' terms predict (runtime excluded),
    and what happened; for an OOM, what it had used when it failed (free at start-up - free at the OOM +
    what it asked for), when its message says (a Triton OOM does not: then only more than was free)."""

    label: str
    free_after_start_gib: float
    transient_gib: float  # the peak without runtime and fragmentation
    outcome: Served
    used_at_oom_gib: float | None = None


@dataclass(frozen=True)
class RuntimeFit:
    low: float  # the runtime is above this (the OOMs)
    high: float  # and at most this (the launches that served)
    value: float

    @property
    def consistent(self) -> bool:
        return self.low < self.high


def fit_runtime(observations: Sequence[ServingObservation], fragmentation_gib: float) -> RuntimeFit:
    """The runtime constant the logs allow: every OOM needed more than it had, every served launch no
    more than it had free; the middle of the interval (None of either side: no fit)."""
    lows = [
        (o.used_at_oom_gib or o.free_after_start_gib) - o.transient_gib - fragmentation_gib
        for o in observations
        if o.outcome is Served.OOM
    ]
    highs = [
        o.free_after_start_gib - o.transient_gib - fragmentation_gib
        for o in observations
        if o.outcome is Served.OK
    ]
    if not lows or not highs:
        raise ValueError("the serving runtime is fitted on at least one OOM under load and one served launch")
    low, high = max(lows), min(highs)
    return RuntimeFit(low, high, (low + high) / 2)


_ASKED = re.compile(r"Tried to allocate ([\d.]+) (MiB|GiB)")
_FREE = re.compile(r"of which ([\d.]+) (MiB|GiB) is free")


def oom_figures(message: str) -> tuple[float, float] | None:
    """(asked, free) in GiB from a torch OOM message; None when it does not say (a Triton OOM)."""
    asked, free = _ASKED.search(message), _FREE.search(message)
    if asked is None or free is None:
        return None

    def gib(m: re.Match[str]) -> float:
        return float(m.group(1)) / (1024.0 if m.group(2) == "MiB" else 1.0)

    return gib(asked), gib(free)
