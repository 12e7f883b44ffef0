"""Tiny Llama targets for the draft tests: an HF-format folder with random weights, and its greedy text."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from tools.pair.draft_data import Sample
from tools.pair.llama_target import LlamaTarget, TargetConfig

TINY: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "hidden_act": "silu",
    "vocab_size": 512,
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
    "rope_scaling": None,
    "max_position_embeddings": 256,
    "tie_word_embeddings": True,
    "bos_token_id": 1,
    "eos_token_id": 2,
}
AUX = [0, 1, 2]  # layer outputs; the 4-layer default [1, 1, 0] would repeat one


def save_target(model: LlamaTarget, folder: Path, config: dict[str, Any]) -> None:
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    tied = config["tie_word_embeddings"]
    state = {k: v.contiguous() for k, v in model.state_dict().items() if not (tied and k == "lm_head.weight")}
    save_file(state, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps(config))


def random_target(folder: Path, seed: int = 0, std: float = 0.2) -> LlamaTarget:
    """Random weights saved as an HF checkpoint (tied embeddings: no lm_head.weight in the file)."""
    torch.manual_seed(seed)
    model = LlamaTarget(TargetConfig.from_dict(TINY))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if not name.endswith("norm.weight"):
                p.normal_(0.0, std)
    save_target(model, folder, TINY)
    return model.eval()


def cycle_target(folder: Path, seed: int = 0, hot: int = 64) -> LlamaTarget:
    """A target whose greedy text a draft can learn: the next token is a fixed function of the current one.

    Its layers are near zero, so the residual stream stays close to the current token's embedding, and its
    (untied) head row for token j is the embedding of the token that precedes j in a random cycle through
    `hot` tokens (every other token leads into the cycle). Greedy text then walks the cycle."""
    config = {**TINY, "tie_word_embeddings": False}
    torch.manual_seed(seed)
    model = LlamaTarget(TargetConfig.from_dict(config))
    vocab = config["vocab_size"]
    gen = torch.Generator().manual_seed(seed)
    hot_ids = torch.randperm(vocab - 3, generator=gen)[:hot] + 3
    following = hot_ids[torch.randint(0, hot, (vocab,), generator=gen)]  # cold tokens enter the cycle
    following[hot_ids] = hot_ids.roll(-1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if not name.endswith("norm.weight"):
                p.normal_(0.0, 0.002)
        emb = model.model.embed_tokens.weight
        emb.normal_(0.0, 1.0)
        head = torch.full((vocab, emb.shape[1]), 0.0)
        # head[j] = sum of the embeddings of the tokens followed by j: logit_j peaks where following[x] == j
        head.index_add_(0, following, emb)
        model.lm_head.weight.copy_(4.0 * head)
    save_target(model, folder, config)
    return model.eval()


def greedy_samples(
    target: LlamaTarget, n: int, prompt_len: int = 8, answer_len: int = 24, seed: int = 0
) -> list[Sample]:
    """Random prompts, then the target's greedy continuation: self-distillation data in miniature."""
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, TINY["vocab_size"], (n, prompt_len), generator=gen)
    with torch.no_grad():
        for _ in range(answer_len):
            logits, _ = target(ids, AUX)
            ids = torch.cat([ids, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    mask = (0,) * prompt_len + (1,) * answer_len
    return [Sample(tuple(row.tolist()), mask) for row in ids]
