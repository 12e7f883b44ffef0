"""What a simulated node is: its GPUs, its model's memory figures, its speeds and its draft's acceptance.

A profile is data (YAML in ``profiles/``, or JSON written by the driver), so the users' case is one
profile among several and a new machine is a new file, not new code. Memory figures are per GPU in GiB,
the unit SGLang prints as "GB"; times are real-world seconds (start-up times are then scaled down by
``startup_time_scale``, serving times never are).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field

from orchestrator.footprint.graph_costs import GraphCosts
from orchestrator.sim.shape_memory import derive_memory
from orchestrator.sim.truth import AcceptCell, StepCell

# SGLang's graph-memory constants, the same ones the driver's memory prior starts from.
_SGLANG_GRAPHS = GraphCosts()

PROFILE_DIR = Path(__file__).with_name("profiles")

VersionBehaviour = Literal["<=0.5.9", ">=0.5.14"]
KvLayout = Literal["mha", "mla"]
# orchestrator.driver.answer.noise.Regime's values, spelled out: sim/ imports shared leaf modules only.
NoiseRegime = Literal["gpu-bound", "overhead-bound"]


class SimProfile(BaseModel):
    """One simulated node: hardware, memory account, speed model and acceptance model."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    # --- identity -----------------------------------------------------------------------------
    name: str
    """Short name, as used by ``load_profile``."""
    description: str = ""
    """One line for humans: what machine and model this stands for."""
    sglang_version: str = "0.5.17"
    """The version the node reports (``/get_server_info``) and whose log lines it prints."""
    version_behaviour: VersionBehaviour = ">=0.5.14"
    """Memory accounting rules. ``<=0.5.9``: the target's KV pool is sized (and its graphs captured)
    before the draft loads, so the draft's weights, KV and graphs come out of the ``1 - f`` slack, and a
    KV pool that does not fit says ``RuntimeError: Not enough memory``. ``>=0.5.14``: both models load
    first and the draft weights are counted; a KV pool that does not fit says ``ValueError``."""

    # --- hardware -----------------------------------------------------------------------------
    gpu_count: int = Field(ge=1)
    """GPUs in the node (a whole-node trial runs with ``--tp-size`` equal to this)."""
    gpu_name: str = "NVIDIA H200"
    """Device name, for humans."""
    gpu_total_mib: float = Field(gt=0)
    """Total memory of one GPU as NVML reports it (MiB)."""
    driver_reserve_mib: float = Field(default=615.0, ge=0)
    """NVML ``used`` with no process at all (the driver's own reserve); torch sees total minus this."""
    cuda_context_gib: float = Field(default=0.62, ge=0)
    """What a process holds once CUDA is initialised, before any tensor."""
    dist_init_gib: float = Field(default=0.09, ge=0)
    """What ``Init torch distributed`` adds (NCCL buffers)."""

    # --- model --------------------------------------------------------------------------------
    model_shape: dict[str, str] | None = None
    """``{target: DIR, draft: DIR}``: the models' config.json folders. When set, the weights, KV bytes per
    token, KV heads, vocabulary and architectures below are derived from them (``sim.shape_memory``, the
    memory prior's own arithmetic), unless the profile states them itself."""
    target_arch: str = "LlamaForCausalLM"
    """``type=`` of the target's ``Load weight end`` line."""
    draft_arch: str = "LlamaForCausalLMEagle3"
    """``type=`` of the draft's ``Load weight end`` line. An EAGLE-3 draft run under ``EAGLE`` accepts
    nothing (SGLang skips its fusion layer silently)."""
    target_weights_gib: float = Field(ge=0)
    """Target weights summed over all GPUs; each GPU holds this divided by the TP size."""
    draft_weights_gib: float = Field(default=0.0, ge=0)
    """Draft weights: on each GPU, or summed over all GPUs when ``draft_weights_sharded``."""
    draft_weights_sharded: bool = False
    """Whether TP splits the draft's weights like the target's (SGLang runs an EAGLE-3 draft in the
    target's TP group: 0.05 GB on one H200, 0.02 GB per GPU at tp 2)."""
    target_kv_layout: KvLayout = "mha"
    """``mla`` prints a single ``KV size`` and keeps the full latent cache on every GPU."""
    target_kv_bytes_per_token: float = Field(gt=0)
    """Bytes of target KV cache per token, all layers, K and V together, before TP sharding."""
    target_kv_sharded: bool = True
    """Whether TP splits the target KV (MHA heads) or replicates it (MLA)."""
    target_kv_heads: int | None = Field(default=None, ge=1)
    """The target's KV heads: TP splits the KV at most this many ways (beyond, each GPU keeps one head
    and the heads are replicated). Unset: no limit."""
    draft_kv_bytes_per_token: float = Field(default=0.0, ge=0)
    """Bytes of draft KV cache per token (all draft layers, K and V), before TP sharding."""
    draft_kv_sharded: bool = True
    """Whether TP splits the draft KV."""
    draft_kv_heads: int | None = Field(default=None, ge=1)
    """The draft's KV heads, as ``target_kv_heads``."""
    pool_overhead_gib: float = Field(default=0.10, ge=0)
    """Request-to-token tables and other pool buffers allocated with the target KV; also the least KV
    budget SGLang accepts (below it: no KV pool)."""
    kv_floor_sharded: bool = False
    """Whether that least KV budget splits by TP: the tiny Llama's minimum viable fraction was 0.0018
    at tp 1 and 0.0007 at tp 2 (real logs)."""
    context_len: int = Field(default=4096, ge=16)
    """The model's context length (``--context-length`` overrides it)."""
    vocab_size: int = Field(default=32000, ge=2)
    """Target vocabulary: output ids are drawn below it, and the logits tensor sizes the allocation
    that fails first in an out-of-memory capture."""
    quantization: str | None = None
    """Quantisation method shown in the server args (e.g. ``compressed-tensors`` for an INT4 MoE)."""
    auto_mem_fraction_factor: float = Field(default=1.0, gt=0, le=1)
    """Multiplier applied after SGLang's auto ``mem_fraction_static`` formula: SGLang lowers the
    fraction for a model with a vision tower (Kimi-K2.5 is one)."""
    chunked_prefill_size: int | None = None
    """Default chunked-prefill size; ``None`` lets the GPU size decide, as SGLang does."""

    # --- start-up memory: buffers and CUDA graphs -----------------------------------------------
    eager_setup_gib: float = Field(default=0.62, ge=0)  # the fitted 0.617 as the log's two decimals print it
    """Attention backend and cuBLAS workspaces allocated before the first capture."""
    eager_setup_gib_per_bs: float = Field(default=_SGLANG_GRAPHS.eager_setup_gib_per_bs, ge=0)
    """Part of that set-up that grows with the largest captured batch size."""
    graph_state_gib_per_bs: float = Field(default=_SGLANG_GRAPHS.state_gib_per_bs, ge=0)
    """``init_cuda_graph_state`` buffers of each decode-graph runner, per unit of its largest batch."""
    target_graph_gib_per_token: float = Field(default=_SGLANG_GRAPHS.target_gib_per_token, ge=0)
    """Target graph pool per token of the largest captured shape (batch x tokens per request); the
    pool is shared, so the largest capture (done first) costs it."""
    draft_graph_gib_per_token: float = Field(default=_SGLANG_GRAPHS.draft_gib_per_token, ge=0)
    """The same for the draft's graphs (decode: batch x top-k x steps; extend: batch x draft tokens)."""
    graph_gib_per_graph: float = Field(default=_SGLANG_GRAPHS.gib_per_graph, ge=0)
    """Fixed cost of each captured batch size, every runner."""
    target_prefill_graph_gib: float = Field(default=_SGLANG_GRAPHS.target_prefill_gib, ge=0)
    """Target prefill (breakable) graphs, when captured."""
    draft_prefill_graph_gib: float = Field(default=_SGLANG_GRAPHS.draft_prefill_gib, ge=0)
    """Draft prefill graphs, when captured."""
    prefill_graph_min_free_gib: float = Field(default=_SGLANG_GRAPHS.prefill_min_free_gib, ge=0)
    """SGLang skips the prefill graphs when less than this is free after the KV pools."""

    # --- serving memory: what a forward allocates beyond the pools and graphs --------------------
    serving_gib_per_token: float = Field(default=0.0, ge=0)
    """Transient memory a forward takes per token it runs (a prefill's prompt tokens; a verify's batch x
    draft tokens; a decode's batch), out of what start-up left free; 0 models none. On the H200 the
    8B shape at fraction 0.98 served s1k2d2 at concurrency 32 (64 tokens a verify) but ran out of memory
    under load with s4k2d8 (256), 3.3 GB being free after start-up (the llama8b-live fixture)."""
    serving_oom_after_requests: int = Field(default=0, ge=0)
    """Requests the server completes before a forward needing more than is free fails: the allocator's
    cache holds out for a while (the real run completed a whole wave of 32 before failing); 0 fails the
    first such forward."""

    # --- start-up times (real world; scaled by startup_time_scale) -----------------------------
    startup_time_scale: float = Field(default=0.015, ge=0)
    """Simulated seconds per real-world second of start-up, so a start takes about a second."""
    import_s: float = Field(default=45.0, ge=0)
    """Imports and process spawning before ``Load weight begin``."""
    weight_load_s: float = Field(default=1.0, ge=0)
    """Loading the target weights."""
    draft_weight_load_s: float = Field(default=0.1, ge=0)
    """Loading the draft weights."""
    kv_alloc_s: float = Field(default=0.5, ge=0)
    """Allocating the KV pools."""
    graph_capture_s_per_bs: float = Field(default=0.1, ge=0)
    """Capturing one batch size of one decode-graph runner."""
    prefill_graph_capture_s: float = Field(default=2.0, ge=0)
    """Capturing one model's prefill graphs."""
    server_start_s: float = Field(default=5.0, ge=0)
    """From the last capture to the HTTP server listening."""

    # --- serving speed (real time: never scaled) -------------------------------------------------
    target_step_base_s: float = Field(gt=0)
    """One target forward at batch 1 with CUDA graphs, excluding the all-reduce."""
    target_step_per_token_s: float = Field(ge=0)
    """Extra time per token in the forward (batch x tokens per request)."""
    allreduce_s: float = Field(default=0.0, ge=0)
    """All-reduce time per forward when TP > 1 (PCIe-only nodes pay a lot here)."""
    draft_step_base_s: float = Field(default=0.0005, ge=0)
    """One draft forward at batch 1."""
    draft_step_per_token_s: float = Field(default=0.0, ge=0)
    """Extra draft time per token in its forward."""
    eager_factor: float = Field(default=1.3, ge=1)
    """How much slower a forward runs without a CUDA graph (batch above the captured sizes)."""
    eager_overhead_s: float = Field(default=0.001, ge=0)
    """Fixed launch overhead added to an eager forward."""
    graph_pool_overhead_s: float = Field(default=0.0, ge=0)
    """Per decode step, per captured target batch size: more captured sizes leave less memory and more
    fragmentation to the allocator (fitted to 82 → 89.5 tok/s for graph bs 512 → 128 on Kimi)."""
    prefill_base_s: float = Field(default=0.005, ge=0)
    """Fixed time of a prefill batch."""
    prefill_per_token_s: float = Field(default=0.00002, ge=0)
    """Prefill time per prompt token."""
    noise_regime: NoiseRegime | None = None
    """Which measured regime the noise figures below stand for (``driver.answer.noise.Regime``'s values):
    ``gpu-bound`` (a real model: launches within 0.3-0.7 %, stages within about 1 %) or ``overhead-bound``
    (the tiny models: launches 6-9 % apart, stages several per cent). The tests hold each built-in
    profile's simulated stages to its regime's spread."""
    step_noise: float = Field(default=0.0, ge=0, le=0.5)
    """Relative standard deviation of a step's duration (seeded; 0 = none)."""
    launch_noise: float = Field(default=0.0, ge=0, le=0.3)
    """Relative standard deviation of a launch's throughput offset, whatever the stage length: two starts
    of one configuration differ by 6-9 % on an H200 with a tiny model, by under 1 % with a GPU-bound one."""
    drift_noise: float = Field(default=0.0, ge=0, le=0.3)
    """Relative standard deviation of the slow drift of throughput within one server; it averages out
    over stages longer than ``drift_period_s`` (tiny models: a 12 s stage moves 2-10 %, a sub-second
    one about 15 %; GPU-bound ones: a stage of a few seconds about 1 %)."""
    drift_period_s: float = Field(default=0.75, gt=0)
    """How long the drift holds one value (real seconds) before it draws the next."""
    launch_seed: int = 0
    """Seeds the launch's offset and drift; the driver sets it per trial, so each launch is a new sample
    and the same sweep is the same again."""

    # --- draft acceptance -------------------------------------------------------------------------
    accept_p0: float = Field(default=0.0, ge=0, le=1)
    """Probability that the target accepts the draft's first token on a prompt of random ids
    (0 = a broken draft)."""
    accept_decay: float = Field(default=0.85, ge=0, le=1)
    """Each later draft position's acceptance is the previous one's times this."""
    topk_gain: float = Field(default=0.2, ge=0, le=2)
    """Top-k > 1 shrinks each position's rejection by ``topk ** -topk_gain``."""
    text_accept_p0: float | None = Field(default=None, ge=0, le=1)
    """``accept_p0`` on a text prompt (chat, code: what the draft was trained on); None = as random ids."""
    text_accept_decay: float | None = Field(default=None, ge=0, le=1)
    """``accept_decay`` on a text prompt; None = as random ids."""
    lossy_rate: float = Field(default=0.0, ge=0, le=1)
    """Chance that a verify step with accepted drafts emits a wrong token (a lossy draft path, a
    numerics mismatch between verify and plain decode): 0 = lossless, as speculative decoding must be."""
    near_tie_flips: bool = False
    """A speculative server emits the second choice at every near tie (`prompts.margin_at`), as bf16
    numerics in a real verify pass can: the lossless check must call that a near tie, not lossy."""

    # --- measured truth (``sim.truth``): used instead of the parametric forms above when set ----------
    measured_steps: tuple[StepCell, ...] | None = None
    """Seconds of one decode step per tree and running batch, as measured on real hardware; replaces the
    ``*_step_*`` figures (a tree it lacks is refused). Prefill and start-up stay parametric."""
    accept_table: tuple[AcceptCell, ...] | None = None
    """Published accept lengths per tree (the lightest load's where a source gives several); replaces
    ``accept_p0``, ``accept_decay`` and ``topk_gain`` for every prompt (a tree it lacks is refused)."""


def builtin_profiles() -> list[str]:
    """Names of the profiles shipped with the package."""
    return sorted(p.stem for p in PROFILE_DIR.glob("*.yaml"))


def _read_mapping(path: Path) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text())  # YAML is a superset of JSON: one reader for both
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a profile must be a mapping, got {type(data).__name__}")
    return data


def _resolve_mapping(data: Mapping[str, Any], seen: tuple[str, ...] = ()) -> dict[str, Any]:
    """A mapping may name a ``base`` profile and override some of its fields."""
    data = dict(data)
    base = data.pop("base", None)
    if base is None:
        return data
    if base in seen:
        raise ValueError(f"profile base loop: {' -> '.join((*seen, base))}")
    merged = _resolve_mapping(_load_raw(str(base)), (*seen, str(base)))
    merged.update(data)
    return merged


def _load_raw(name_or_path: str) -> dict[str, Any]:
    builtin = PROFILE_DIR / f"{name_or_path}.yaml"
    if builtin.is_file():
        return _read_mapping(builtin)
    path = Path(name_or_path)
    if path.is_file():
        return _read_mapping(path)
    raise FileNotFoundError(
        f"no simulated profile {name_or_path!r}: give a file path or one of {', '.join(builtin_profiles())}"
    )


def load_profile(name_or_path: str | Path | Mapping[str, Any]) -> SimProfile:
    """A built-in name (``h200-tiny``), a YAML/JSON file, or a mapping (optionally with ``base``)."""
    if isinstance(name_or_path, Mapping):
        return SimProfile.model_validate(derive_memory(_resolve_mapping(name_or_path)))
    return SimProfile.model_validate(derive_memory(_resolve_mapping(_load_raw(str(name_or_path)))))
