"""The GGUF converter and its NumPy truth, on a tiny Llama GGUF written here the way llama.cpp writes one.

The tiny file gets q/k rows permuted exactly as llama.cpp's converter permutes them, Q8_0 and Q4_1 tensors
like the real package's, and tied embeddings. The converted folder must then match the GGUF's NumPy
forward within bf16 rounding, and a converter that forgets to un-permute must not.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

from tools.pair.check_target import MAX_RELATIVE_RMS, compare_logits  # noqa: E402
from tools.pair.convert_gguf import hf_name, unpermute  # noqa: E402
from tools.pair.gguf_reference import GgufError, GgufLlama  # noqa: E402

HIDDEN, LAYERS, HEADS, KV_HEADS, FFN, VOCAB = 64, 2, 4, 2, 96, 128


def permute(weight: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's convert_hf_to_gguf.py LlamaModel.permute, verbatim in NumPy."""
    return (
        weight.reshape(heads, 2, weight.shape[0] // heads // 2, *weight.shape[1:])
        .swapaxes(1, 2)
        .reshape(weight.shape)
    )


def hf_weights(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    d = HIDDEN // HEADS

    def mat(rows: int, cols: int) -> np.ndarray:
        return (rng.standard_normal((rows, cols)) / np.sqrt(cols)).astype(np.float32)

    w = {"model.embed_tokens.weight": mat(VOCAB, HIDDEN), "model.norm.weight": 1 + 0.1 * mat(1, HIDDEN)[0]}
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = 1 + 0.1 * mat(1, HIDDEN)[0]
        w[p + "post_attention_layernorm.weight"] = 1 + 0.1 * mat(1, HIDDEN)[0]
        w[p + "self_attn.q_proj.weight"] = mat(HEADS * d, HIDDEN)
        w[p + "self_attn.k_proj.weight"] = mat(KV_HEADS * d, HIDDEN)
        w[p + "self_attn.v_proj.weight"] = mat(KV_HEADS * d, HIDDEN)
        w[p + "self_attn.o_proj.weight"] = mat(HIDDEN, HEADS * d)
        w[p + "mlp.gate_proj.weight"] = mat(FFN, HIDDEN)
        w[p + "mlp.up_proj.weight"] = mat(FFN, HIDDEN)
        w[p + "mlp.down_proj.weight"] = mat(HIDDEN, FFN)
    return w


def write_gguf(path: Path, weights: dict[str, np.ndarray]) -> None:
    """A llama GGUF of ``weights`` as llama.cpp's converter writes it: permuted q/k, quantized matrices."""
    from gguf import GGMLQuantizationType as Q
    from gguf import GGUFWriter
    from gguf.quants import quantize

    writer = GGUFWriter(str(path), "llama")
    writer.add_block_count(LAYERS)
    writer.add_context_length(256)
    writer.add_embedding_length(HIDDEN)
    writer.add_feed_forward_length(FFN)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_rope_freq_base(100000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(VOCAB)
    gguf_names = {hf_name(g): g for g in _all_gguf_names()}
    for name, arr in weights.items():
        g = gguf_names[name]
        if g.endswith("attn_q.weight"):
            arr = permute(arr, HEADS)
        elif g.endswith("attn_k.weight"):
            arr = permute(arr, KV_HEADS)
        if arr.ndim == 1:
            writer.add_tensor(g, arr)
        else:
            qtype = Q.Q8_0 if g == "token_embd.weight" else Q.Q4_1
            writer.add_tensor(g, quantize(arr, qtype), raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def _all_gguf_names() -> list[str]:
    names = ["token_embd.weight", "output_norm.weight"]
    for i in range(LAYERS):
        for part in ("attn_norm", "ffn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate",
                     "ffn_up", "ffn_down"):  # fmt: skip
            names.append(f"blk.{i}.{part}.weight")
    return names


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("gguf") / "tiny.gguf"
    write_gguf(path, hf_weights())
    return path


def test_unpermute_undoes_llama_cpp_permute() -> None:
    w = np.arange(8 * 64 * 3, dtype=np.float32).reshape(8 * 64 // 8, 24)
    for heads in (1, 2, 4):
        assert np.array_equal(unpermute(permute(w, heads), heads), w)
    assert not np.array_equal(permute(w, 4), w)


def test_reference_reads_shape_and_runs(tiny_gguf: Path) -> None:
    model = GgufLlama(tiny_gguf)
    assert (model.shape.layers, model.shape.hidden, model.shape.heads, model.shape.kv_heads) == (2, 64, 4, 2)
    logits = model.logits([1, 5, 9, 3])
    assert logits.shape == (4, VOCAB)
    assert np.isfinite(logits).all()
    # Causal: the first position's logits do not depend on what follows it.
    assert np.allclose(model.logits([1, 7])[0], logits[0], atol=1e-5)


def test_reference_refuses_a_non_llama_file(tmp_path: Path) -> None:
    from gguf import GGUFWriter

    path = tmp_path / "gpt2.gguf"
    writer = GGUFWriter(str(path), "gpt2")
    writer.add_tensor("x", np.zeros(4, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(GgufError, match=r"general\.architecture is .gpt2."):
        GgufLlama(path)


def test_converted_folder_matches_the_gguf_forward(tiny_gguf: Path, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("safetensors")
    pytest.importorskip("transformers")
    from tools.pair.check_target import folder_logits
    from tools.pair.convert_gguf import write_weights

    model = GgufLlama(tiny_gguf)
    config = write_weights(model, tmp_path / "hf")
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert config["rope_theta"] == 100000.0
    assert config["tie_word_embeddings"] is True
    ids = [3, 17, 42, 99, 5, 64, 8, 120, 1, 77, 31, 2]
    top1, rel, _, kl = compare_logits(model.logits(ids), folder_logits(tmp_path / "hf", ids))
    assert rel < MAX_RELATIVE_RMS, rel
    assert top1 >= 0.9 and kl < 0.01


def test_a_converter_that_forgets_to_unpermute_fails_the_check(
    tiny_gguf: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    import tools.pair.convert_gguf as convert
    from tools.pair.check_target import folder_logits

    monkeypatch.setattr(convert, "unpermute", lambda w, heads: w)
    model = GgufLlama(tiny_gguf)
    convert.write_weights(model, tmp_path / "hf")
    ids = [3, 17, 42, 99, 5, 64, 8, 120, 1, 77, 31, 2]
    _, rel, _, _ = compare_logits(model.logits(ids), folder_logits(tmp_path / "hf", ids))
    assert rel > 2 * MAX_RELATIVE_RMS, rel
