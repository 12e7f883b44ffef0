"""The target (a Llama checkpoint in HF layout) in plain torch: logits and the aux states EAGLE-3 reads.

Only torch and safetensors: the training machine may have no `transformers`. The folder holds config.json and
model.safetensors (or shards listed in model.safetensors.index.json) with HF names
(`model.embed_tokens.weight`, `model.layers.N.self_attn.q_proj.weight`, `model.norm.weight`, `lm_head.weight`
unless `tie_word_embeddings`).

What is captured, and why these states: SGLang's `LlamaModel.forward` (`python/sglang/srt/models/llama.py`)
appends `hidden_states + residual` *before* running layer i for every i in `layers_to_capture`, i.e. the
input of layer i, which is the output of layer i-1 residual included. `set_eagle3_layers_to_capture(ids)`
sets `layers_to_capture = [id + 1 for id in ids]` when the draft's config has
`eagle_config.eagle_aux_hidden_state_layer_ids`, and `[2, L // 2, L - 3]` otherwise (so in 0.5.17, whose
`LlamaModel` is unchanged there). So an id here names the
*output of layer id* (0-based), the same convention as SpecForge's default `[1, L // 2 - 1, L - 4]`
(`specforge/algorithms/model_providers.py`), and both defaults capture the same three states. For
SmolLM2-135M (L = 30): ids [1, 14, 26], the inputs of layers 2, 15, 27 (HF `hidden_states[2], [15], [27]`).
The states are concatenated in layer order, as SGLang collects them (`layers.aux_hidden_states`) for `fc`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from tools.pair.layers import RMSNorm, SwiGLU, apply_rope, check_plain_rope, rope_cos_sin, rope_theta_of


@dataclass(frozen=True)
class TargetConfig:
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    vocab_size: int
    rms_norm_eps: float
    rope_theta: float
    tie_word_embeddings: bool
    max_position_embeddings: int

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> TargetConfig:
        check_plain_rope(raw)
        if raw.get("hidden_act", "silu") != "silu":
            raise NotImplementedError(f"hidden_act={raw['hidden_act']!r}: only silu is implemented")
        heads = int(raw["num_attention_heads"])
        return cls(
            hidden_size=int(raw["hidden_size"]),
            intermediate_size=int(raw["intermediate_size"]),
            num_hidden_layers=int(raw["num_hidden_layers"]),
            num_attention_heads=heads,
            num_key_value_heads=int(raw.get("num_key_value_heads", heads)),
            head_dim=int(raw.get("head_dim") or int(raw["hidden_size"]) // heads),
            vocab_size=int(raw["vocab_size"]),
            rms_norm_eps=float(raw.get("rms_norm_eps", 1e-6)),
            rope_theta=rope_theta_of(raw),
            tie_word_embeddings=bool(raw.get("tie_word_embeddings", False)),
            max_position_embeddings=int(raw.get("max_position_embeddings", 2048)),
        )

    def default_aux_layer_ids(self) -> list[int]:
        """SGLang's default capture, [2, L // 2, L - 3] as layer inputs, written as layer outputs."""
        n = self.num_hidden_layers
        return [1, n // 2 - 1, n - 4]


class _Attention(nn.Module):
    def __init__(self, cfg: TargetConfig) -> None:
        super().__init__()
        self.cfg = cfg
        d, h, kv = cfg.head_dim, cfg.num_attention_heads, cfg.num_key_value_heads
        self.q_proj = nn.Linear(cfg.hidden_size, h * d, bias=False)
        self.k_proj = nn.Linear(cfg.hidden_size, kv * d, bias=False)
        self.v_proj = nn.Linear(cfg.hidden_size, kv * d, bias=False)
        self.o_proj = nn.Linear(h * d, cfg.hidden_size, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        d = self.cfg.head_dim
        q = self.q_proj(x).view(b, t, -1, d).transpose(1, 2)
        k = self.k_proj(x).view(b, t, -1, d).transpose(1, 2)
        v = self.v_proj(x).view(b, t, -1, d).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        # Right-padded batches need no padding mask: with a causal mask a real token never sees a later pad.
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        return self.o_proj(out.transpose(1, 2).reshape(b, t, -1))


class _Layer(nn.Module):
    def __init__(self, cfg: TargetConfig) -> None:
        super().__init__()
        self.self_attn = _Attention(cfg)
        self.mlp = SwiGLU(cfg.hidden_size, cfg.intermediate_size)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class _Body(nn.Module):
    def __init__(self, cfg: TargetConfig) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(_Layer(cfg) for _ in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)


class LlamaTarget(nn.Module):
    """Parameter names equal the HF checkpoint's, so `load_state_dict` takes the file as it is."""

    def __init__(self, cfg: TargetConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.model = _Body(cfg)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        if cfg.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    @property
    def embed_weight(self) -> torch.Tensor:
        return self.model.embed_tokens.weight

    def forward(
        self, input_ids: torch.Tensor, aux_layer_ids: list[int] | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """logits [b, t, vocab] and the aux states concatenated [b, t, len(ids) * hidden] (layer outputs)."""
        ids = self.cfg.default_aux_layer_ids() if aux_layer_ids is None else list(aux_layer_ids)
        if any(not 0 <= i < self.cfg.num_hidden_layers for i in ids):
            raise ValueError(f"aux layer ids {ids} outside 0..{self.cfg.num_hidden_layers - 1}")
        x = self.model.embed_tokens(input_ids)
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        cos, sin = rope_cos_sin(positions, self.cfg.head_dim, self.cfg.rope_theta, x.dtype)
        captured: dict[int, torch.Tensor] = {}
        for i, layer in enumerate(self.model.layers):
            x = layer(x, cos, sin)
            if i in ids:
                captured[i] = x
        logits = self.lm_head(self.model.norm(x))
        # SGLang tests each layer for membership in its list: each state once, in layer order
        return logits, torch.cat([captured[i] for i in sorted(captured)], dim=-1)


def read_config(folder: str | Path) -> dict[str, Any]:
    raw: dict[str, Any] = json.loads((Path(folder) / "config.json").read_text())
    return raw


def load_state(folder: str | Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    folder = Path(folder)
    index = folder / "model.safetensors.index.json"
    if index.exists():
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        state: dict[str, torch.Tensor] = {}
        for shard in shards:
            state.update(load_file(str(folder / shard)))
        return state
    return load_file(str(folder / "model.safetensors"))


def load_target(
    folder: str | Path, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32
) -> LlamaTarget:
    """The target in eval mode, frozen, on `device` in `dtype`."""
    cfg = TargetConfig.from_dict(read_config(folder))
    model = LlamaTarget(cfg)
    state = {k: v for k, v in load_state(folder).items() if "rotary_emb" not in k}
    if cfg.tie_word_embeddings:
        state.pop("lm_head.weight", None)  # some tied checkpoints still carry the copy
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [k for k in missing if not (cfg.tie_word_embeddings and k == "lm_head.weight")]
    if missing or unexpected:
        raise ValueError(f"checkpoint mismatch: missing {missing[:5]}, unexpected {unexpected[:5]}")
    model.to(device=device, dtype=dtype).eval()
    model.requires_grad_(False)
    return model
