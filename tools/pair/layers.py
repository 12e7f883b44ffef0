"""The pieces the target and the draft share: RMSNorm, rotary embeddings, the SwiGLU MLP, config reading.

Both follow the Llama conventions SGLang serves (`python/sglang/srt/models/llama.py`): RMSNorm computed in
float32 and scaled by its weight (not 1 + weight), rotary embeddings in the NeoX layout (`rotate_half`, the
`is_neox_style=True` default), an MLP of `down(silu(gate(x)) * up(x))`.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # float32 statistics whatever the input dtype, as SGLang's and HF's kernels do: a bf16 mean of squares
        # over 576 channels would shift every normalised value by a visible amount.
        dtype = x.dtype
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(dtype)


class SwiGLU(nn.Module):
    def __init__(self, hidden: int, inner: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(hidden, inner, bias=False)
        self.up_proj = nn.Linear(hidden, inner, bias=False)
        self.down_proj = nn.Linear(inner, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


def rope_cos_sin(
    positions: torch.Tensor, head_dim: int, theta: float, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of shape positions.shape + (head_dim,), NeoX layout (the two halves repeat)."""
    inv_freq = 1.0 / (
        theta ** (torch.arange(0, head_dim, 2, device=positions.device, dtype=torch.float32) / head_dim)
    )
    freqs = positions.to(torch.float32)[..., None] * inv_freq
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x: [batch, heads, seq, head_dim]; cos/sin: [seq, head_dim] or [batch, seq, head_dim]."""
    if cos.dim() == 3:
        cos, sin = cos[:, None], sin[:, None]
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


def rope_theta_of(config: dict[str, Any]) -> float:
    """`rope_theta` (transformers 4) or `rope_parameters.rope_theta` (transformers 5 writes only that)."""
    params = config.get("rope_parameters")
    if isinstance(params, dict) and "rope_theta" in params:
        return float(params["rope_theta"])
    return float(config.get("rope_theta", 10000.0))


def check_plain_rope(config: dict[str, Any]) -> None:
    """Only unscaled RoPE is implemented; a scaled one would silently give the wrong positions."""
    for key in ("rope_scaling", "rope_parameters"):
        value = config.get(key)
        if isinstance(value, dict) and value.get("rope_type", value.get("type", "default")) != "default":
            raise NotImplementedError(f"{key}={value!r}: only the default (unscaled) RoPE is implemented")
