"""An EAGLE-3 draft for a Llama target, in the layout SGLang serves as `LlamaForCausalLMEagle3`.

What SGLang 0.5.17 does with the folder (read in the sglang 0.5.17 wheel: `sglang/srt/models/llama_eagle3.py`,
`sglang/srt/models/llama.py`, `sglang/srt/speculative/eagle_worker_v2.py`,
`sglang/srt/model_executor/model_runner_components/spec_aux_hidden_state.py`; earlier versions in
sgl-project/sglang's `python/sglang/srt/...` agree on everything below but the layer's name):

- Parameters: `model.embed_tokens` (vocab_size x hidden), `model.fc` (len(aux ids) * target_hidden_size ->
  hidden, bias only if the config says `bias`), `model.layers.0` (older versions: `model.midlayer`; one
  decoder layer whose `self_attn.qkv_proj` takes 2 * hidden inputs; `self_attn.o_proj`, `mlp.gate_up_proj`,
  `mlp.down_proj`, `input_layernorm`, `hidden_norm`, `post_attention_layernorm`), `model.norm`, and `lm_head`
  (draft_vocab_size x hidden) when `tie_word_embeddings` is false. With `tie_word_embeddings` true the head
  *is* the full-vocab embedding, so a reduced draft vocabulary needs it false. Optional extras stay off:
  `norm_before_fc`, `fc_norm` (per-aux norms) and `norm_output` (feed back the normed state) default false.
- `load_weights` renames `midlayer` -> `layers.0` (kept for old checkpoints), maps `.q_proj/.k_proj/.v_proj`
  -> `.qkv_proj` and `.gate_proj/.up_proj` -> `.gate_up_proj`, and prefixes `model.` to a name not found as
  it is. The file holds `midlayer.self_attn.q_proj.weight`, ..., `fc.weight`, `norm.weight`,
  `lm_head.weight` (no `model.` prefix): the names SpecForge exports (`specforge/export/to_sglang.py`), which
  load in 0.5.17 and in the versions before the rename. `d2t` becomes `hot_token_id = d2t + arange(len(d2t))`,
  the target id of each draft id; `t2d` is read and ignored. A name matching no parameter is skipped
  silently, which is why the tests pin the names.
- The layer: residual = hidden; x = cat(input_layernorm(embeds), hidden_norm(hidden)) -> attention ->
  + residual -> post_attention_layernorm -> MLP -> + residual; logits = lm_head(norm(out)), and `out` (before
  the norm) is the hidden state fed back to the next draft step. `fc` runs only when the incoming hidden
  state is wider than the embedding, i.e. on the target's concatenated aux states.
- Embeddings: the EAGLE worker (`init_lm_head`) calls `set_embed(target embed)` on an EAGLE-3 draft (or
  `set_embed_and_head` when the config has no `draft_vocab_size` and untied embeddings), and `set_embed`
  replaces the draft's embedding unless `target_hidden_size != hidden_size`. The draft's hidden size equals
  the target's here, so the folder carries no embedding (SpecForge's exporter drops it too) and training uses
  the target's, frozen.
- Aux layers: the target's model runner reads `eagle_config["eagle_aux_hidden_state_layer_ids"]` from the
  draft's config and captures the input of layer id + 1 for each, in layer order (see
  `tools.pair.llama_target`); the draft's `fc` width comes from the length of that list.
- Vocabulary (SpecForge `specforge/data/preprocessing.py`, `process_token_dict_to_mappings`): the draft ids
  are the N most frequent answer tokens *sorted by target id*; `d2t[i] = target_id(i) - i` (int64, length N)
  and `t2d` is a bool mask over the target vocabulary (length vocab_size).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from tools.pair.layers import RMSNorm, SwiGLU, apply_rope, rope_cos_sin

ARCHITECTURE = "LlamaForCausalLMEagle3"


@dataclass(frozen=True)
class DraftConfig:
    hidden_size: int
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    vocab_size: int  # the target's: SGLang sizes the (replaced) embedding with it
    draft_vocab_size: int
    rms_norm_eps: float
    rope_theta: float
    max_position_embeddings: int
    aux_layer_ids: tuple[int, ...]  # layer outputs of the target, 0-based (see tools.pair.llama_target)
    # Keys copied from the target's config.json as they are (rope keys, token ids), so the draft reads RoPE
    # exactly as the target does under whichever transformers version SGLang runs with.
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def for_target(
        cls, target: dict[str, Any], draft_vocab_size: int, aux_layer_ids: list[int] | None = None
    ) -> DraftConfig:
        """The draft of one layer shaped like one layer of `target` (its config.json as a dict)."""
        from tools.pair.llama_target import TargetConfig

        t = TargetConfig.from_dict(target)
        ids = t.default_aux_layer_ids() if aux_layer_ids is None else list(aux_layer_ids)
        if not ids or ids != sorted(set(ids)) or ids[0] < 0 or ids[-1] >= t.num_hidden_layers:
            # SGLang captures each listed layer once, in layer order: a repeated or unordered id would hand
            # the draft other states than it was trained on (the default repeats one below 7 layers)
            raise ValueError(f"aux layer ids {ids} must ascend strictly within 0..{t.num_hidden_layers - 1}")
        if not 0 < draft_vocab_size <= t.vocab_size:
            raise ValueError(f"draft vocab {draft_vocab_size} not within 1..{t.vocab_size}")
        keep = ("rope_scaling", "rope_parameters", "bos_token_id", "eos_token_id", "pad_token_id")
        return cls(
            hidden_size=t.hidden_size,
            intermediate_size=t.intermediate_size,
            num_attention_heads=t.num_attention_heads,
            num_key_value_heads=t.num_key_value_heads,
            head_dim=t.head_dim,
            vocab_size=t.vocab_size,
            draft_vocab_size=draft_vocab_size,
            rms_norm_eps=t.rms_norm_eps,
            rope_theta=t.rope_theta,
            max_position_embeddings=t.max_position_embeddings,
            aux_layer_ids=tuple(ids),
            extra={k: target[k] for k in keep if k in target},
        )

    def to_hf(self) -> dict[str, Any]:
        """config.json for SGLang."""
        out: dict[str, Any] = {
            "architectures": [ARCHITECTURE],
            "model_type": "llama",
            "num_hidden_layers": 1,
            "hidden_size": self.hidden_size,
            "target_hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads,
            "head_dim": self.head_dim,
            "hidden_act": "silu",
            "rms_norm_eps": self.rms_norm_eps,
            "rope_theta": self.rope_theta,
            "max_position_embeddings": self.max_position_embeddings,
            "vocab_size": self.vocab_size,
            "draft_vocab_size": self.draft_vocab_size,
            "tie_word_embeddings": False,  # true would make lm_head the full-vocab embedding
            "attention_bias": False,
            "mlp_bias": False,
            "torch_dtype": "bfloat16",
            "eagle_config": {
                "eagle_aux_hidden_state_layer_ids": list(self.aux_layer_ids),
                "use_aux_hidden_state": True,
            },
        }
        out.update(self.extra)
        out["rope_theta"] = self.rope_theta  # also under transformers 4, which ignores rope_parameters
        return out

    @classmethod
    def from_hf(cls, raw: dict[str, Any]) -> DraftConfig:
        from tools.pair.layers import rope_theta_of

        if raw.get("architectures") != [ARCHITECTURE] or int(raw.get("num_hidden_layers", 1)) != 1:
            raise ValueError(f"not a one-layer {ARCHITECTURE} config")
        heads = int(raw["num_attention_heads"])
        keep = ("rope_scaling", "rope_parameters", "bos_token_id", "eos_token_id", "pad_token_id")
        return cls(
            hidden_size=int(raw["hidden_size"]),
            intermediate_size=int(raw["intermediate_size"]),
            num_attention_heads=heads,
            num_key_value_heads=int(raw.get("num_key_value_heads", heads)),
            head_dim=int(raw.get("head_dim") or int(raw["hidden_size"]) // heads),
            vocab_size=int(raw["vocab_size"]),
            draft_vocab_size=int(raw["draft_vocab_size"]),
            rms_norm_eps=float(raw["rms_norm_eps"]),
            rope_theta=rope_theta_of(raw),
            max_position_embeddings=int(raw["max_position_embeddings"]),
            aux_layer_ids=tuple(raw["eagle_config"]["eagle_aux_hidden_state_layer_ids"]),
            extra={k: raw[k] for k in keep if k in raw},
        )


# One draft step's keys and values, rotated: [batch, kv_heads, seq, head_dim] each.
KV = tuple[torch.Tensor, torch.Tensor]


def ttt_mask(seq: int, step: int, device: torch.device) -> torch.Tensor:
    """Which keys a query at position t sees in TTT step `step` (0-based): [seq, seq * (step + 1)] bool.

    Keys are laid out step by step. Step 0's are the states the target's hidden states produced; a query
    sees those at positions <= t (causal). Step j >= 1's keys exist only along the query's own draft chain,
    so a query sees step j's key at its own position t only. This is SGLang's KV cache during drafting: the
    draft-extend entries of the verified prefix, then one entry per draft step of this chain
    (SpecForge `LlamaAttention.forward` with `cache_hidden`, the same attention written with loops).
    """
    idx = torch.arange(seq, device=device)
    blocks = [idx[None, :] <= idx[:, None]] + [idx[None, :] == idx[:, None]] * step
    return torch.cat(blocks, dim=1)


class _DraftAttention(nn.Module):
    def __init__(self, cfg: DraftConfig) -> None:
        super().__init__()
        self.cfg = cfg
        d, h, kv = cfg.head_dim, cfg.num_attention_heads, cfg.num_key_value_heads
        # 2 * hidden inputs: the normed embedding and the normed hidden state side by side.
        self.q_proj = nn.Linear(2 * cfg.hidden_size, h * d, bias=False)
        self.k_proj = nn.Linear(2 * cfg.hidden_size, kv * d, bias=False)
        self.v_proj = nn.Linear(2 * cfg.hidden_size, kv * d, bias=False)
        self.o_proj = nn.Linear(h * d, cfg.hidden_size, bias=False)

    def forward(self, x: torch.Tensor, positions: torch.Tensor, cache: list[KV]) -> torch.Tensor:
        b, t, _ = x.shape
        d = self.cfg.head_dim
        q = self.q_proj(x).view(b, t, -1, d).transpose(1, 2)
        k = self.k_proj(x).view(b, t, -1, d).transpose(1, 2)
        v = self.v_proj(x).view(b, t, -1, d).transpose(1, 2)
        cos, sin = rope_cos_sin(positions, d, self.cfg.rope_theta, q.dtype)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        cache.append((k, v))
        step = len(cache) - 1
        # Heads repeated by hand rather than `enable_gqa`: with a mask, only the memory-efficient CUDA kernel
        # avoids materialising the scores, and it does not take grouped heads.
        group = self.cfg.num_attention_heads // self.cfg.num_key_value_heads
        keys = torch.cat([kk for kk, _ in cache], dim=2).repeat_interleave(group, dim=1)
        values = torch.cat([vv for _, vv in cache], dim=2).repeat_interleave(group, dim=1)
        mask = ttt_mask(t, step, x.device)
        out = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask)
        return self.o_proj(out.transpose(1, 2).reshape(b, t, -1))


class _MidLayer(nn.Module):
    def __init__(self, cfg: DraftConfig) -> None:
        super().__init__()
        self.self_attn = _DraftAttention(cfg)
        self.mlp = SwiGLU(cfg.hidden_size, cfg.intermediate_size)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.hidden_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def forward(
        self, embeds: torch.Tensor, hidden: torch.Tensor, positions: torch.Tensor, cache: list[KV]
    ) -> torch.Tensor:
        x = torch.cat([self.input_layernorm(embeds), self.hidden_norm(hidden)], dim=-1)
        h = hidden + self.self_attn(x, positions, cache)
        return h + self.mlp(self.post_attention_layernorm(h))


class Eagle3Draft(nn.Module):
    """`state_dict()` names are the checkpoint names SGLang's loader maps (see the module docstring).

    The embedding is the target's, held as a non-persistent buffer so that it moves with the module but
    stays out of `state_dict()` and out of the saved folder.
    """

    d2t: torch.Tensor
    t2d: torch.Tensor
    embed_weight: torch.Tensor

    def __init__(self, cfg: DraftConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.fc = nn.Linear(len(cfg.aux_layer_ids) * cfg.hidden_size, cfg.hidden_size, bias=False)
        self.midlayer = _MidLayer(cfg)
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.draft_vocab_size, bias=False)
        self.register_buffer("d2t", torch.zeros(cfg.draft_vocab_size, dtype=torch.int64))
        self.register_buffer("t2d", torch.zeros(cfg.vocab_size, dtype=torch.bool))
        self.register_buffer("embed_weight", torch.empty(0), persistent=False)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.normal_(module.weight, std=0.02)
            elif isinstance(module, RMSNorm):
                nn.init.ones_(module.weight)

    def set_vocab(self, draft_to_target: torch.Tensor) -> None:
        """Draft id i stands for target id draft_to_target[i] (ascending, as SpecForge orders them)."""
        ids = draft_to_target.to(torch.int64).cpu()
        if ids.numel() != self.cfg.draft_vocab_size or not bool((ids[1:] > ids[:-1]).all()):
            raise ValueError("the draft vocabulary must be draft_vocab_size distinct ascending target ids")
        t2d = torch.zeros(self.cfg.vocab_size, dtype=torch.bool)
        t2d[ids] = True
        self.d2t.copy_(ids - torch.arange(ids.numel()))
        self.t2d.copy_(t2d)

    def draft_ids(self) -> torch.Tensor:
        """Target id of each draft id: SGLang's hot_token_id."""
        return self.d2t + torch.arange(self.d2t.numel(), device=self.d2t.device)

    def set_embed(self, weight: torch.Tensor) -> None:
        if tuple(weight.shape) != (self.cfg.vocab_size, self.cfg.hidden_size):
            raise ValueError(f"embedding {tuple(weight.shape)} is not vocab x hidden of the draft")
        self.embed_weight = weight.detach()

    def embed(self, target_ids: torch.Tensor) -> torch.Tensor:
        return F.embedding(target_ids, self.embed_weight)

    def project(self, aux: torch.Tensor) -> torch.Tensor:
        return self.fc(aux)

    def step(
        self, embeds: torch.Tensor, hidden: torch.Tensor, positions: torch.Tensor, cache: list[KV]
    ) -> torch.Tensor:
        """One draft step: the pre-norm hidden state, which the next step takes as its `hidden`."""
        return self.midlayer(embeds, hidden, positions, cache)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.lm_head(self.norm(hidden))


def param_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def save_draft(folder: str | Path, model: Eagle3Draft) -> Path:
    """config.json and model.safetensors (weights bf16, d2t int64, t2d bool); no embedding."""
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    state = {}
    for name, tensor in model.state_dict().items():
        t = tensor.detach().cpu()
        state[name] = (t.to(torch.bfloat16) if t.is_floating_point() else t).contiguous()
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    (folder / "config.json").write_text(json.dumps(model.cfg.to_hf(), indent=2) + "\n")
    # safetensors creates its file owner-only; a server running as another user must read it
    (folder / "model.safetensors").chmod(0o644)
    return folder


def load_draft(folder: str | Path, dtype: torch.dtype = torch.float32) -> Eagle3Draft:
    """The saved draft back as a module (without its embedding: `set_embed` the target's)."""
    from safetensors.torch import load_file

    folder = Path(folder)
    cfg = DraftConfig.from_hf(json.loads((folder / "config.json").read_text()))
    model = Eagle3Draft(cfg)
    state = load_file(str(folder / "model.safetensors"))
    model.load_state_dict(state, strict=True)
    return model.to(dtype)


def folder_bytes(folder: str | Path) -> int:
    return sum(p.stat().st_size for p in Path(folder).iterdir() if p.is_file())


def describe(cfg: DraftConfig) -> dict[str, Any]:
    out = asdict(cfg)
    out["aux_layer_ids"] = list(cfg.aux_layer_ids)
    return out


def expected_bytes(cfg: DraftConfig) -> int:
    """Size of model.safetensors before its header: bf16 weights, int64 d2t, bool t2d."""
    h, d, heads, kv = cfg.hidden_size, cfg.head_dim, cfg.num_attention_heads, cfg.num_key_value_heads
    attn = 2 * h * (heads + 2 * kv) * d + heads * d * h
    fc = len(cfg.aux_layer_ids) * h * h
    weights = fc + attn + 3 * h * cfg.intermediate_size + 4 * h + cfg.draft_vocab_size * h
    return 2 * weights + 8 * cfg.draft_vocab_size + cfg.vocab_size
