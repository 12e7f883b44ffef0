"""The torch-only Llama target matches transformers' LlamaForCausalLM on the same weights."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("safetensors")

from tests.pair.pair_targets import TINY  # noqa: E402
from tools.pair.llama_target import TargetConfig, load_target  # noqa: E402


@pytest.mark.parametrize("tied", [True, False])
def test_logits_and_aux_states_match_transformers(tmp_path: Path, tied: bool) -> None:
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(
        **{k: v for k, v in TINY.items() if k not in ("architectures", "model_type", "rope_scaling")}
        | {"tie_word_embeddings": tied, "rope_theta": 5000.0}
    )
    torch.manual_seed(0)
    reference = transformers.LlamaForCausalLM(config).eval()
    with torch.no_grad():  # larger than the default init, so that every layer moves the residual stream
        for p in reference.parameters():
            p.add_(0.05 * torch.randn_like(p))
    reference.save_pretrained(tmp_path, safe_serialization=True)
    ours = load_target(tmp_path)
    assert ours.cfg.rope_theta == 5000.0 and ours.cfg.tie_word_embeddings is tied

    ids = torch.randint(0, TINY["vocab_size"], (2, 40), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = reference(ids, output_hidden_states=True)
        logits, aux = ours(ids, [0, 1, 2])
    torch.testing.assert_close(logits, want.logits, atol=1e-4, rtol=1e-4)
    # hidden_states[i + 1] is the output of layer i, residual included: what SGLang captures as the
    # input of layer i + 1
    expected_aux = torch.cat([want.hidden_states[i + 1] for i in (0, 1, 2)], dim=-1)
    torch.testing.assert_close(aux, expected_aux, atol=1e-4, rtol=1e-4)


def test_default_aux_layers_are_sglangs() -> None:
    # SGLang (python/sglang/srt/models/llama.py) captures the inputs of layers [2, L // 2, L - 3]
    cfg = TargetConfig.from_dict({**TINY, "num_hidden_layers": 30})
    assert [i + 1 for i in cfg.default_aux_layer_ids()] == [2, 15, 27]


def test_rope_theta_from_rope_parameters() -> None:
    raw = {k: v for k, v in TINY.items() if k != "rope_theta"}
    raw["rope_parameters"] = {"rope_type": "default", "rope_theta": 100000.0}
    assert TargetConfig.from_dict(raw).rope_theta == 100000.0
    with pytest.raises(NotImplementedError):
        TargetConfig.from_dict({**raw, "rope_parameters": {"rope_type": "yarn", "factor": 4.0}})
