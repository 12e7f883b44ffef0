"""A model's memory shape from its config.json: weight bytes and KV bytes per token, per GPU at a tp size.

This reads only what SGLang itself reads to build the model (sizes, heads, experts, dtype, quantization),
so the figures are known before anything launches. Where SGLang splits a tensor across the tp ranks and
where it keeps a full copy on every GPU follows its layers:

- embeddings and the LM head are vocab-parallel (``VocabParallelEmbedding`` / ``ParallelLMHead``): split;
- q/o projections and the MLP are column/row-parallel: split; K/V heads split until each GPU holds one
  (``max(1, kv_heads // tp)``: fewer heads than ranks are replicated);
- MLA: ``q_a``/``kv_a`` projections are replicated, ``q_b``/``kv_b``/``o`` split; the latent KV cache
  (``kv_lora_rank + qk_rope_head_dim`` per layer) is whole on every GPU;
- MoE experts split their intermediate size across tp (no expert parallelism); the router is replicated;
- norms are replicated (a few KiB);
- an EAGLE-3 draft (``*Eagle3`` architectures) has a first layer whose attention reads 2 x hidden, an
  ``fc`` (``torch.nn.Linear``, replicated) from 3 x ``target_hidden_size``, its own LM head of
  ``draft_vocab_size`` and its own embeddings. SGLang builds that layer by constructing an ordinary Llama
  layer and then replacing its qkv projection and MLP: the replaced tensors are freed, but the CUDA
  caching allocator keeps their blocks, so ``Load weight end ... mem usage`` counts them too (this is
  what takes the 8B-shaped draft from 1.77 to the 2.14 GB the H200 printed).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from orchestrator.errors import ErrorKind, SpecsweepError

GIB = float(1 << 30)

DTYPE_BYTES = {"bfloat16": 2.0, "float16": 2.0, "half": 2.0, "float32": 2.0, "float": 2.0, "fp8": 1.0}
# float32 checkpoints are served in 16 bits: SGLang's dtype "auto" casts them down.

# Fitted on the real logs (SGLang 0.5.17, one H200): the first model a tp-1 process loads prints about
# 0.015 GB more than its parameters (the rotary cache's scratch and the allocator's first 20 MiB blocks:
# tiny Llama 0.086 -> 0.10, the 8B shape 14.96 -> 14.98). At tp > 1 the NCCL set-up has already left
# cached blocks the first tensors reuse (tiny Llama at tp 2: 0.043 -> 0.04), so nothing is added.
FIRST_LOAD_SLACK_GIB = 0.015


def kv_shards(tp: int, kv_heads: int | None) -> int:
    """How many ways the KV heads split: by tp, until each GPU holds one head (then they replicate)."""
    return min(tp, kv_heads) if kv_heads else tp


class ShapeErrorKind(StrEnum):
    UNREADABLE = "unreadable"
    MISSING_FIELD = "missing_field"
    UNKNOWN_QUANTIZATION = "unknown_quantization"
    UNKNOWN_ARCHITECTURE = "unknown_architecture"


class ShapeError(SpecsweepError, ValueError):
    """A config.json the arithmetic cannot use: names the file and the field (`problem`: what is wrong
    with it)."""

    kind = ErrorKind.BAD_INPUT

    def __init__(self, path: Path, field: str, problem: ShapeErrorKind, detail: str) -> None:
        # The file itself as the field (unreadable) is named once: `x/config.json: not found`.
        super().__init__(f"{path}: {detail}" if field == path.name else f"{path}: {field}: {detail}")
        self.path, self.field, self.problem = path, field, problem


class Quant(StrEnum):
    NONE = "none"
    FP8 = "fp8"
    INT4 = "int4"  # AWQ, GPTQ, compressed-tensors pack-quantized 4-bit
    INT8 = "int8"


# Families whose layers the arithmetic below describes (decoder-only, Llama-like or DeepSeek-like).
KNOWN_MODEL_TYPES = {
    "llama", "mistral", "qwen2", "qwen3", "qwen2_moe", "qwen3_moe", "mixtral", "deepseek_v2",
    "deepseek_v3", "kimi_k2", "glm4_moe", "gemma", "gemma2", "phi3", "gpt_oss",
}  # fmt: skip


@dataclass(frozen=True)
class ModelShape:
    """What of a config.json the memory arithmetic needs (a multimodal model's text part)."""

    path: Path
    architecture: str
    model_type: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tie_embeddings: bool
    dtype_bytes: float
    quant: Quant
    quant_group: int  # elements per scale (int4/int8 grouped, fp8 block); 0: per channel
    # MoE (0 experts: dense)
    experts: int = 0
    moe_intermediate: int = 0
    shared_experts: int = 0
    dense_layers: int = 0  # the first layers keep a dense MLP (DeepSeek's first_k_dense_replace)
    # MLA (kv_lora_rank 0: ordinary attention)
    kv_lora_rank: int = 0
    q_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    qk_nope_head_dim: int = 0
    v_head_dim: int = 0
    # EAGLE-3 draft
    eagle3: bool = False
    target_hidden: int = 0
    draft_vocab: int = 0

    @property
    def mla(self) -> bool:
        return self.kv_lora_rank > 0

    def kv_heads_per_gpu(self, tp: int) -> int:
        return max(1, self.kv_heads // tp)

    def kv_bytes_per_token(self, tp: int, kv_dtype_bytes: float | None = None) -> float:
        """K and V of every layer for one token on one GPU (MLA: the latent cache, whole on each GPU)."""
        b = kv_dtype_bytes if kv_dtype_bytes is not None else min(self.dtype_bytes, 2.0)
        if self.mla:
            return self.layers * (self.kv_lora_rank + self.qk_rope_head_dim) * b
        return self.layers * self.kv_heads_per_gpu(tp) * self.head_dim * 2 * b

    # -- weights -------------------------------------------------------------------------------------

    def _linear(self, n_in: int, n_out: int, split: int) -> float:
        """Bytes of one linear layer's weight (and its quantization scales) on one GPU."""
        elems = n_in * n_out / split
        if self.quant is Quant.NONE:
            return elems * self.dtype_bytes
        bits = {Quant.FP8: 8, Quant.INT8: 8, Quant.INT4: 4}[self.quant]
        group = self.quant_group or n_in
        scales = elems / group * (4 if self.quant is Quant.FP8 else 2)  # fp32 block scales / fp16 group
        zeros = elems / group * bits / 8 if self.quant is Quant.INT4 else 0.0
        return elems * bits / 8 + scales + zeros

    def _attention(self, tp: int, n_in: int) -> tuple[float, float]:
        """(qkv, o) bytes of one layer's attention on one GPU, reading ``n_in`` features."""
        if self.mla:
            q_head = self.qk_nope_head_dim + self.qk_rope_head_dim
            if self.q_lora_rank:
                q = self._linear(n_in, self.q_lora_rank, 1) + self._linear(
                    self.q_lora_rank, self.heads * q_head, tp
                )
            else:
                q = self._linear(n_in, self.heads * q_head, tp)
            kv_a = self._linear(n_in, self.kv_lora_rank + self.qk_rope_head_dim, 1)
            kv_b = self._linear(self.kv_lora_rank, self.heads * (self.qk_nope_head_dim + self.v_head_dim), tp)
            o = self._linear(self.heads * self.v_head_dim, self.hidden, tp)
            return q + kv_a + kv_b, o
        kv_split = min(tp, self.kv_heads)  # below one head per GPU the heads are replicated
        q = self._linear(n_in, self.heads * self.head_dim, tp)
        kv = 2 * self._linear(n_in, self.kv_heads * self.head_dim, kv_split)
        o = self._linear(self.heads * self.head_dim, self.hidden, tp)
        return q + kv, o

    def _mlp(self, tp: int, layer: int) -> float:
        dense = 3 * self._linear(self.hidden, self.intermediate, tp)
        if not self.experts or layer < self.dense_layers:
            return dense
        expert = 3 * self._linear(self.hidden, self.moe_intermediate, tp)
        router = self.hidden * self.experts * self.dtype_bytes
        return (self.experts + self.shared_experts) * expert + router

    def weight_bytes(self, tp: int) -> float:
        """What ``Load weight end ... mem usage`` counts on one GPU, in bytes (before allocator slack)."""
        emb_bytes = min(self.dtype_bytes, 2.0)  # embeddings and heads are never quantized here
        embed = self.vocab * self.hidden * emb_bytes / tp
        head_vocab = self.draft_vocab if self.eagle3 and self.draft_vocab else self.vocab
        head = 0.0 if self.tie_embeddings else head_vocab * self.hidden * emb_bytes / tp
        norms = (2 * self.layers + 1) * self.hidden * emb_bytes
        total = embed + head + norms
        for layer in range(self.layers):
            n_in = 2 * self.hidden if self.eagle3 and layer == 0 else self.hidden
            qkv, o = self._attention(tp, n_in)
            total += qkv + o + self._mlp(tp, layer)
        if self.eagle3:
            total += 3 * (self.target_hidden or self.hidden) * self.hidden * emb_bytes  # fc, replicated
            # The first layer's original qkv (hidden wide) and MLP, replaced but still cached.
            qkv, _ = self._attention(tp, self.hidden)
            total += qkv + self._mlp(tp, 0)
        return total

    def shared_embedding_gib(self, tp: int) -> float:
        """What an EAGLE-3 draft frees once it shares the target's embedding (SGLang deletes its own:
        ``LlamaForCausalLMEagle3.set_embed``), GiB on one GPU; 0 where it keeps it (a draft as wide as
        its target only) or is no EAGLE-3 draft (an EAGLE-2 draft would free its head too: not modelled,
        so not credited)."""
        if not self.eagle3 or (self.target_hidden and self.target_hidden != self.hidden):
            return 0.0
        return self.vocab * self.hidden * min(self.dtype_bytes, 2.0) / tp / GIB

    def weights_gib(self, tp: int, first_load: bool) -> float:
        slack = FIRST_LOAD_SLACK_GIB if first_load and tp == 1 else 0.0
        return self.weight_bytes(tp) / GIB + slack


# -- reading config.json -----------------------------------------------------------------------------


def _int(cfg: dict[str, Any], path: Path, *names: str, default: int | None = None) -> int:
    for name in names:
        value = cfg.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
    if default is not None:
        return default
    raise ShapeError(path, names[0], ShapeErrorKind.MISSING_FIELD, "missing or not a whole number; add it")


def _quant(cfg: dict[str, Any], path: Path) -> tuple[Quant, int]:
    qc = cfg.get("quantization_config") or cfg.get("compression_config")
    if not qc:
        return Quant.NONE, 0
    if not isinstance(qc, dict):
        raise ShapeError(path, "quantization_config", ShapeErrorKind.UNKNOWN_QUANTIZATION, "not a mapping")
    qc_map: dict[str, Any] = qc
    method = str(qc_map.get("quant_method", "")).lower()
    if method == "fp8":
        block = qc.get("weight_block_size") or [0]
        return Quant.FP8, int(block[0]) * int(block[-1]) if block[0] else 0
    if method in ("awq", "gptq", "awq_marlin", "gptq_marlin", "marlin"):
        bits = int(qc_map.get("bits", qc_map.get("w_bit", 4)))
        group = int(qc_map.get("group_size", qc_map.get("q_group_size", 128)))
        return (Quant.INT4 if bits == 4 else Quant.INT8), max(group, 0)
    if method == "compressed-tensors":
        groups = qc.get("config_groups") or {}
        for group in groups.values() if isinstance(groups, dict) else ():
            weights = group.get("weights") or {}
            bits = int(weights.get("num_bits", 16))
            kind = str(weights.get("type", "int"))
            size = int(weights.get("group_size") or 0)
            if kind == "float" and bits == 8:
                return Quant.FP8, size
            if bits in (4, 8):
                return (Quant.INT4 if bits == 4 else Quant.INT8), size
        raise ShapeError(
            path, "quantization_config.config_groups", ShapeErrorKind.UNKNOWN_QUANTIZATION,
            "no weights group of 4 or 8 bits; the memory prior knows int4/int8/fp8 compressed-tensors",
        )  # fmt: skip
    raise ShapeError(
        path, "quantization_config.quant_method", ShapeErrorKind.UNKNOWN_QUANTIZATION,
        f"{method or '(none)'} is not one of fp8, awq, gptq, compressed-tensors; "
        "set memory.prior: false to sweep with learning only",
    )  # fmt: skip


def read_config(model_dir: str | Path) -> dict[str, Any]:
    """The parsed config.json of a model folder (or a config.json path); ShapeError when unreadable."""
    path = Path(model_dir)
    if path.is_dir() or not path.name.endswith(".json"):
        path = path / "config.json"
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        detail = "not found (a model's folder holds one)"
        raise ShapeError(path, path.name, ShapeErrorKind.UNREADABLE, detail) from None
    except (OSError, ValueError) as err:
        why = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
        raise ShapeError(path, path.name, ShapeErrorKind.UNREADABLE, f"cannot be read ({why})") from None
    if not isinstance(data, dict):
        raise ShapeError(path, path.name, ShapeErrorKind.UNREADABLE, "not a JSON mapping")
    data["__path__"] = str(path)
    return data


def load_shape(model_dir: str | Path) -> ModelShape:
    """The memory shape of the model in ``model_dir`` (its config.json)."""
    top = read_config(model_dir)
    path = Path(top.pop("__path__"))
    archs = top.get("architectures") or []
    arch = str(archs[0]) if archs else ""
    cfg = top.get("text_config") if isinstance(top.get("text_config"), dict) else top
    assert isinstance(cfg, dict)
    model_type = str(cfg.get("model_type") or top.get("model_type") or "")
    eagle3 = "eagle3" in arch.lower()
    if model_type not in KNOWN_MODEL_TYPES and not eagle3:
        raise ShapeError(
            path, "model_type", ShapeErrorKind.UNKNOWN_ARCHITECTURE,
            f"{model_type or '(none)'} ({arch or 'no architectures'}) is not a family the memory prior "
            "knows; set memory.prior: false to sweep with learning only",
        )  # fmt: skip
    hidden = _int(cfg, path, "hidden_size")
    heads = _int(cfg, path, "num_attention_heads")
    has_quant = top.get("quantization_config") or top.get("compression_config")
    quant, group = _quant(top if has_quant else cfg, path)
    dtype = str(cfg.get("torch_dtype") or cfg.get("dtype") or top.get("torch_dtype") or "bfloat16")
    if dtype not in DTYPE_BYTES:
        raise ShapeError(path, "torch_dtype", ShapeErrorKind.MISSING_FIELD, f"{dtype} is not a known dtype")
    experts = _int(cfg, path, "n_routed_experts", "num_experts", "num_local_experts", default=0)
    layers = _int(cfg, path, "num_hidden_layers")
    intermediate = _int(cfg, path, "intermediate_size")
    return ModelShape(
        path=path,
        architecture=arch,
        model_type=model_type,
        hidden=hidden,
        layers=layers,
        heads=heads,
        kv_heads=_int(cfg, path, "num_key_value_heads", default=heads),
        head_dim=_int(cfg, path, "head_dim", default=hidden // max(heads, 1)),
        intermediate=intermediate,
        vocab=_int(cfg, path, "vocab_size"),
        tie_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        dtype_bytes=DTYPE_BYTES[dtype],
        quant=quant,
        quant_group=group,
        experts=experts,
        # Mixtral names its experts' size intermediate_size; DeepSeek and Qwen MoE have their own.
        moe_intermediate=_int(cfg, path, "moe_intermediate_size", default=intermediate) if experts else 0,
        shared_experts=_int(cfg, path, "n_shared_experts", default=0) if experts else 0,
        dense_layers=_int(cfg, path, "first_k_dense_replace", default=0) if experts else 0,
        kv_lora_rank=_int(cfg, path, "kv_lora_rank", default=0),
        q_lora_rank=_int(cfg, path, "q_lora_rank", default=0),
        qk_rope_head_dim=_int(cfg, path, "qk_rope_head_dim", default=0),
        qk_nope_head_dim=_int(cfg, path, "qk_nope_head_dim", default=0),
        v_head_dim=_int(cfg, path, "v_head_dim", default=0),
        eagle3=eagle3,
        target_hidden=_int(cfg, path, "target_hidden_size", default=hidden) if eagle3 else 0,
        draft_vocab=_int(cfg, path, "draft_vocab_size", default=0) if eagle3 else 0,
    )
