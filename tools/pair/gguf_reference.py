"""An independent forward pass of a Llama GGUF file in NumPy: the truth the converted model is held to.

It reads the GGUF's tensors with `gguf` (the reader llama.cpp publishes), dequantizes them to float32
and runs the decoder as llama.cpp does, on the tensors exactly as stored. Nothing here comes from
`transformers`, which does the conversion being checked: in particular llama.cpp's converter permutes the
rows of ``attn_q``/``attn_k`` so that rotary embedding turns *adjacent* pairs of a head's dimensions
(llama.cpp's "normal" rope), where Hugging Face Llama turns the two *halves*. This forward applies the
adjacent-pair rotation to the stored rows and never un-permutes, so a converter that un-permutes wrongly
(or not at all) disagrees with it by far more than bf16 rounding.

Float32 throughout, one sequence, causal attention with grouped KV heads, tied embeddings when the file
has no ``output.weight``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType, GGUFReader
from gguf.quants import dequantize

log = logging.getLogger(__name__)


class GgufError(ValueError):
    """The file is not a Llama GGUF this forward can run, with what is missing."""


@dataclass(frozen=True)
class LlamaShape:
    """The decoder's shape as the GGUF metadata states it (``llama.*`` keys)."""

    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    vocab: int
    rope_theta: float
    rms_eps: float
    context: int

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


def _field(reader: GGUFReader, key: str) -> object:
    field = reader.get_field(key)
    if field is None:
        raise GgufError(f"GGUF metadata has no {key!r}: not a llama GGUF this reference can run")
    return field.contents()


def read_shape(reader: GGUFReader) -> LlamaShape:
    arch = _field(reader, "general.architecture")
    if arch != "llama":
        raise GgufError(f"general.architecture is {arch!r}; this reference runs 'llama' only")
    tokens = reader.get_field("tokenizer.ggml.tokens")
    vocab_field = reader.get_field("llama.vocab_size")
    vocab = int(vocab_field.contents()) if vocab_field is not None else len(tokens.data) if tokens else 0
    return LlamaShape(
        layers=int(_field(reader, "llama.block_count")),  # type: ignore[call-overload]
        hidden=int(_field(reader, "llama.embedding_length")),  # type: ignore[call-overload]
        intermediate=int(_field(reader, "llama.feed_forward_length")),  # type: ignore[call-overload]
        heads=int(_field(reader, "llama.attention.head_count")),  # type: ignore[call-overload]
        kv_heads=int(_field(reader, "llama.attention.head_count_kv")),  # type: ignore[call-overload]
        vocab=vocab,
        rope_theta=float(_field(reader, "llama.rope.freq_base")),  # type: ignore[arg-type]
        rms_eps=float(_field(reader, "llama.attention.layer_norm_rms_epsilon")),  # type: ignore[arg-type]
        context=int(_field(reader, "llama.context_length")),  # type: ignore[call-overload]
    )


class GgufLlama:
    """The GGUF's tensors, dequantized on first use, and a float32 forward over them."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.reader = GGUFReader(path)
        self.shape = read_shape(self.reader)
        self._tensors = {t.name: t for t in self.reader.tensors}
        self._cache: dict[str, np.ndarray] = {}

    def tensor(self, name: str) -> np.ndarray:
        """One tensor in NumPy's order (rows = output features), float32."""
        if name not in self._cache:
            t = self._tensors.get(name)
            if t is None:
                raise GgufError(f"{self.path.name} has no tensor {name!r}")
            if t.tensor_type in (GGMLQuantizationType.F32, GGMLQuantizationType.F16):
                arr = np.asarray(t.data, dtype=np.float32)
            else:
                arr = dequantize(t.data, t.tensor_type).astype(np.float32)
            # GGUF lists dims innermost first; NumPy's order is the reverse.
            self._cache[name] = arr.reshape(tuple(int(d) for d in reversed(t.shape)))
        return self._cache[name]

    def has(self, name: str) -> bool:
        return name in self._tensors

    def logits(self, ids: list[int]) -> np.ndarray:
        """Logits at every position of ``ids`` (shape ``[len(ids), vocab]``), float32."""
        s = self.shape
        if not ids:
            raise GgufError("logits need at least one token id")
        x = self.tensor("token_embd.weight")[np.asarray(ids)]
        cos, sin = _rope_tables(len(ids), s.head_dim, s.rope_theta)
        for i in range(s.layers):
            p = f"blk.{i}."
            h = _rms_norm(x, self.tensor(p + "attn_norm.weight"), s.rms_eps)
            x = x + _attention(self, p, h, cos, sin)
            h = _rms_norm(x, self.tensor(p + "ffn_norm.weight"), s.rms_eps)
            gate = h @ self.tensor(p + "ffn_gate.weight").T
            up = h @ self.tensor(p + "ffn_up.weight").T
            x = x + (_silu(gate) * up) @ self.tensor(p + "ffn_down.weight").T
        x = _rms_norm(x, self.tensor("output_norm.weight"), s.rms_eps)
        head = "output.weight" if self.has("output.weight") else "token_embd.weight"
        return np.asarray(x @ self.tensor(head).T, dtype=np.float32)


def _rms_norm(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * weight


def _silu(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-x))


def _rope_tables(n: int, head_dim: int, theta: float) -> tuple[np.ndarray, np.ndarray]:
    inv = theta ** (-np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    angles = np.outer(np.arange(n, dtype=np.float64), inv)  # [n, head_dim/2]
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


def _rope_adjacent(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """llama.cpp's normal rope: dims (2i, 2i+1) of each head turn by angle i. ``x``: [n, heads, dim]."""
    even, odd = x[..., 0::2], x[..., 1::2]
    c, s = cos[:, None, :], sin[:, None, :]
    out = np.empty_like(x)
    out[..., 0::2] = even * c - odd * s
    out[..., 1::2] = even * s + odd * c
    return out


def _attention(model: GgufLlama, p: str, h: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    s = model.shape
    n, d = h.shape[0], s.head_dim
    q = (h @ model.tensor(p + "attn_q.weight").T).reshape(n, s.heads, d)
    k = (h @ model.tensor(p + "attn_k.weight").T).reshape(n, s.kv_heads, d)
    v = (h @ model.tensor(p + "attn_v.weight").T).reshape(n, s.kv_heads, d)
    q, k = _rope_adjacent(q, cos, sin), _rope_adjacent(k, cos, sin)
    group = s.heads // s.kv_heads
    k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    scores = np.einsum("qhd,khd->hqk", q, k) / np.sqrt(d)
    scores = scores + np.triu(np.full((n, n), -np.inf, dtype=np.float32), k=1)
    scores = scores - scores.max(axis=-1, keepdims=True)
    weights = np.exp(scores)
    weights /= weights.sum(axis=-1, keepdims=True)
    out = np.einsum("hqk,khd->qhd", weights, v).reshape(n, s.heads * d)
    return np.asarray(out @ model.tensor(p + "attn_output.weight").T)


def gguf_tokens(reader: GGUFReader) -> list[str]:
    """The vocabulary as the GGUF lists it, id order."""
    field = reader.get_field("tokenizer.ggml.tokens")
    if field is None:
        raise GgufError("GGUF metadata has no tokenizer.ggml.tokens")
    return [str(t) for t in field.contents()]
