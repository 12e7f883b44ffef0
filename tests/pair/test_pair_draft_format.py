"""The saved draft is what SGLang's `LlamaForCausalLMEagle3` loads: names, shapes, dtypes, config keys."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("safetensors")

from safetensors.torch import load_file  # noqa: E402

from tests.pair.pair_targets import AUX, TINY  # noqa: E402
from tools.pair.eagle3_draft import (  # noqa: E402
    DraftConfig,
    Eagle3Draft,
    expected_bytes,
    folder_bytes,
    load_draft,
    save_draft,
)

# The checkpoint names SGLang's LlamaForCausalLMEagle3.load_weights maps onto its parameters
# (sglang/srt/models/llama_eagle3.py, sglang 0.5.17; SpecForge's exporter, specforge/export/to_sglang.py,
# writes these names). No embedding: the draft takes the target's.
CHECKPOINT_NAMES = [
    "d2t",
    "fc.weight",
    "lm_head.weight",
    "midlayer.hidden_norm.weight",
    "midlayer.input_layernorm.weight",
    "midlayer.mlp.down_proj.weight",
    "midlayer.mlp.gate_proj.weight",
    "midlayer.mlp.up_proj.weight",
    "midlayer.post_attention_layernorm.weight",
    "midlayer.self_attn.k_proj.weight",
    "midlayer.self_attn.o_proj.weight",
    "midlayer.self_attn.q_proj.weight",
    "midlayer.self_attn.v_proj.weight",
    "norm.weight",
    "t2d",
]
# SGLang 0.5.17's own parameter names for a one-layer draft (same file): `model.embed_tokens.weight` too,
# which the EAGLE worker replaces with the target's (sglang/srt/speculative/eagle_worker_v2.py, `set_embed`).
SGLANG_PARAMS = {
    "lm_head.weight",
    "model.embed_tokens.weight",
    "model.fc.weight",
    "model.layers.0.hidden_norm.weight",
    "model.layers.0.input_layernorm.weight",
    "model.layers.0.mlp.down_proj.weight",
    "model.layers.0.mlp.gate_up_proj.weight",
    "model.layers.0.post_attention_layernorm.weight",
    "model.layers.0.self_attn.o_proj.weight",
    "model.layers.0.self_attn.qkv_proj.weight",
    "model.norm.weight",
}
# The loader's tables, as written there: old names, then stacked parameters.
LEGACY = {"midlayer": "layers.0"}
STACKED = [
    (".qkv_proj", ".q_proj"),
    (".qkv_proj", ".k_proj"),
    (".qkv_proj", ".v_proj"),
    (".gate_up_proj", ".gate_proj"),
    (".gate_up_proj", ".up_proj"),
]

SMOLLM2_135M = {  # SmolLM2-135M-Instruct's config.json, the keys that matter here
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 576,
    "intermediate_size": 1536,
    "num_hidden_layers": 30,
    "num_attention_heads": 9,
    "num_key_value_heads": 3,
    "head_dim": 64,
    "hidden_act": "silu",
    "vocab_size": 49152,
    "rms_norm_eps": 1e-5,
    "rope_theta": 100000,
    "rope_scaling": None,
    "max_position_embeddings": 8192,
    "tie_word_embeddings": True,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "pad_token_id": 2,
}


def sglang_param(name: str) -> str | None:
    """Where `LlamaForCausalLMEagle3.load_weights` puts a checkpoint tensor (None: d2t and t2d)."""
    for old, new in LEGACY.items():
        name = name.replace(old, new)
    if "d2t" in name or "t2d" in name:
        return None
    for param, shard in STACKED:
        if shard in name:
            name = name.replace(shard, param)
            break
    return name if name in SGLANG_PARAMS else f"model.{name}"


def saved_tiny(folder: Path, draft_vocab: int = 128) -> Eagle3Draft:
    cfg = DraftConfig.for_target(TINY, draft_vocab, AUX)
    torch.manual_seed(0)
    draft = Eagle3Draft(cfg)
    draft.set_vocab(torch.sort(torch.randperm(TINY["vocab_size"])[:draft_vocab]).values)
    save_draft(folder, draft)
    return draft


def test_saved_tensors_are_the_names_shapes_and_dtypes_sglang_loads(tmp_path: Path) -> None:
    saved_tiny(tmp_path)
    state = load_file(str(tmp_path / "model.safetensors"))
    assert sorted(state) == CHECKPOINT_NAMES
    h, heads, kv, d, inner = 64, 4, 2, 16, 128
    shapes = {
        "fc.weight": (h, 3 * h),
        "midlayer.self_attn.q_proj.weight": (heads * d, 2 * h),  # embedding and hidden side by side
        "midlayer.self_attn.k_proj.weight": (kv * d, 2 * h),
        "midlayer.self_attn.v_proj.weight": (kv * d, 2 * h),
        "midlayer.self_attn.o_proj.weight": (h, heads * d),
        "midlayer.mlp.gate_proj.weight": (inner, h),
        "midlayer.mlp.up_proj.weight": (inner, h),
        "midlayer.mlp.down_proj.weight": (h, inner),
        "lm_head.weight": (128, h),
        "d2t": (128,),
        "t2d": (512,),
    }
    for name, tensor in state.items():
        assert tuple(tensor.shape) == shapes.get(name, (h,)), name
        expected = {"d2t": torch.int64, "t2d": torch.bool}.get(name, torch.bfloat16)
        assert tensor.dtype == expected, name
    targets = {sglang_param(n) for n in state} - {None}
    assert targets == SGLANG_PARAMS - {"model.embed_tokens.weight"}


def test_d2t_holds_target_minus_draft_id_and_t2d_marks_the_draft_tokens(tmp_path: Path) -> None:
    draft = saved_tiny(tmp_path)
    state = load_file(str(tmp_path / "model.safetensors"))
    hot = state["d2t"] + torch.arange(128)  # SGLang: hot_token_id = d2t + arange
    assert torch.equal(hot, draft.draft_ids())
    assert bool((hot[1:] > hot[:-1]).all())
    assert int(state["t2d"].sum()) == 128 and bool(state["t2d"][hot].all())


def test_config_has_what_sglang_reads(tmp_path: Path) -> None:
    saved_tiny(tmp_path)
    cfg = json.loads((tmp_path / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLMEagle3"]
    assert cfg["model_type"] == "llama" and cfg["num_hidden_layers"] == 1
    assert cfg["tie_word_embeddings"] is False  # else lm_head would be the full-vocab embedding
    assert cfg["draft_vocab_size"] == 128 and cfg["vocab_size"] == 512
    assert (
        cfg["target_hidden_size"] == cfg["hidden_size"] == 64
    )  # equal: SGLang shares the target's embedding
    assert cfg["eagle_config"] == {"eagle_aux_hidden_state_layer_ids": AUX, "use_aux_hidden_state": True}
    for key, value in [
        ("num_attention_heads", 4), ("num_key_value_heads", 2), ("head_dim", 16), ("intermediate_size", 128),
        ("rms_norm_eps", 1e-5), ("rope_theta", 10000.0), ("hidden_act", "silu"), ("torch_dtype", "bfloat16"),
        ("max_position_embeddings", 256),
    ]:  # fmt: skip
        assert cfg[key] == value, key


def test_load_draft_round_trips(tmp_path: Path) -> None:
    draft = saved_tiny(tmp_path)
    back = load_draft(tmp_path)
    assert back.cfg == draft.cfg
    for name, tensor in draft.state_dict().items():
        want = tensor.to(torch.bfloat16).float() if tensor.is_floating_point() else tensor
        assert torch.equal(back.state_dict()[name], want), name


def test_aux_layer_ids_must_ascend() -> None:
    with pytest.raises(ValueError, match="ascend"):
        DraftConfig.for_target(TINY, 128)  # 4 layers: the default [1, 1, 0] repeats a layer
    with pytest.raises(ValueError, match="ascend"):
        DraftConfig.for_target(TINY, 128, [2, 1, 0])


def test_smollm2_draft_shape_and_size(tmp_path: Path) -> None:
    cfg = DraftConfig.for_target(SMOLLM2_135M, 8192)
    assert list(cfg.aux_layer_ids) == [1, 14, 26]  # SGLang's default capture [2, 15, 27], as layer outputs
    hf = cfg.to_hf()
    assert hf["rope_theta"] == 100000 and hf["head_dim"] == 64 and hf["vocab_size"] == 49152
    draft = Eagle3Draft(cfg)
    draft.set_vocab(torch.arange(8192))
    save_draft(tmp_path, draft)
    size = folder_bytes(tmp_path)
    assert expected_bytes(cfg) < size < expected_bytes(cfg) + 8192
    assert size < 20_000_000
