"""The tiny models' weight writer: valid safetensors, the driver's tensor layout, zero lm_heads."""

from __future__ import annotations

import importlib.util
import itertools
import json
import random
import shutil
import struct
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

MODELS = Path(__file__).resolve().parents[1] / "trials" / "models"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("make_weights", MODELS / "make_weights.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["make_weights"] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


mw = _load()


def _bf16(raw: bytes) -> list[float]:
    halves = struct.unpack(f"<{len(raw) // 2}H", raw)
    return [struct.unpack("<f", struct.pack("<I", h << 16))[0] for h in halves]


def _tensor_bytes(path: Path, header: dict[str, Any], name: str) -> bytes:
    begin, end = header[name]["data_offsets"]
    with path.open("rb") as f:
        (length,) = struct.unpack("<Q", f.read(8))
        f.seek(8 + length + begin)
        return f.read(end - begin)


def _check_layout(path: Path) -> dict[str, Any]:
    """What every safetensors loader insists on: the header parses, offsets tile the data exactly."""
    raw = path.read_bytes()
    (length,) = struct.unpack("<Q", raw[:8])
    assert length % 8 == 0
    header = json.loads(raw[8 : 8 + length])
    assert header.pop("__metadata__") == {"format": "pt"}
    spans = sorted(v["data_offsets"] for v in header.values())
    assert spans[0][0] == 0
    assert all(a[1] == b[0] for a, b in itertools.pairwise(spans))
    assert spans[-1][1] == len(raw) - 8 - length
    for meta in header.values():
        n = 1
        for d in meta["shape"]:
            n *= d
        assert meta["dtype"] == "BF16"
        assert meta["data_offsets"][1] - meta["data_offsets"][0] == 2 * n
    return header


def test_small_file_round_trips(tmp_path: Path) -> None:
    specs = [
        mw.TensorSpec("a.weight", (3, 5), mw.Fill.RANDOM),
        mw.TensorSpec("b.weight", (7,), mw.Fill.ONES),
        mw.TensorSpec("c.weight", (2, 2, 3), mw.Fill.ZEROS),
    ]
    path = tmp_path / "m.safetensors"
    mw.write_safetensors(path, specs, random.Random(1))
    header = _check_layout(path)
    assert {k: v["shape"] for k, v in header.items()} == {
        "a.weight": [3, 5],
        "b.weight": [7],
        "c.weight": [2, 2, 3],
    }
    assert mw.read_header(path)["a.weight"] == header["a.weight"]
    assert _bf16(_tensor_bytes(path, header, "b.weight")) == [1.0] * 7
    assert _bf16(_tensor_bytes(path, header, "c.weight")) == [0.0] * 12
    values = _bf16(_tensor_bytes(path, header, "a.weight"))
    assert all(1 / 64 <= abs(v) < 1 / 32 for v in values)
    assert any(v > 0 for v in values) and any(v < 0 for v in values)
    assert not (tmp_path / "m.safetensors.tmp").exists()


def test_random_values_follow_the_seed_and_span_chunks(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(mw, "_CHUNK_ELEMENTS", 7)  # several chunks per tensor
    specs = [mw.TensorSpec("x", (10, 3), mw.Fill.RANDOM), mw.TensorSpec("y", (9,), mw.Fill.ONES)]
    files = []
    for i, seed in enumerate((5, 5, 6)):
        path = tmp_path / f"{i}.safetensors"
        mw.write_safetensors(path, specs, random.Random(seed))
        _check_layout(path)
        files.append(path.read_bytes())
    assert files[0] == files[1]
    assert files[0] != files[2]
    header = mw.read_header(tmp_path / "0.safetensors")
    assert _bf16(_tensor_bytes(tmp_path / "0.safetensors", header, "y")) == [1.0] * 9
    assert len(set(_bf16(_tensor_bytes(tmp_path / "0.safetensors", header, "x")))) > 10


def test_duplicate_names_are_refused(tmp_path: Path) -> None:
    specs = [mw.TensorSpec("a", (1,), mw.Fill.ONES), mw.TensorSpec("a", (2,), mw.Fill.ONES)]
    with pytest.raises(ValueError, match="duplicate"):
        mw.write_safetensors(tmp_path / "m.safetensors", specs, random.Random(0))


def test_layouts_match_the_configs() -> None:
    target_cfg = json.loads((MODELS / "tiny-llama" / "config.json").read_text())
    draft_cfg = json.loads((MODELS / "tiny-llama-eagle3" / "config.json").read_text())
    assert target_cfg["architectures"] == ["LlamaForCausalLM"] and target_cfg["tie_word_embeddings"] is False
    assert draft_cfg["architectures"] == ["LlamaForCausalLMEagle3"]
    target = {s.name: s for s in mw.target_tensors(target_cfg)}
    draft = {s.name: s for s in mw.draft_tensors(draft_cfg)}
    # The names and shapes the real accept run loaded (4 layers x 9 tensors + 3; 13 in the draft).
    assert len(target) == 39 and len(draft) == 13
    assert target["model.embed_tokens.weight"].shape == (32000, 512)
    assert target["lm_head.weight"] == mw.TensorSpec("lm_head.weight", (32000, 512), mw.Fill.ZEROS)
    assert target["model.layers.3.mlp.down_proj.weight"].shape == (512, 1536)
    assert target["model.layers.0.input_layernorm.weight"].fill is mw.Fill.ONES
    assert draft["lm_head.weight"] == mw.TensorSpec("lm_head.weight", (8000, 512), mw.Fill.ZEROS)
    assert draft["fc.weight"].shape == (512, 1536)
    assert draft["midlayer.self_attn.q_proj.weight"].shape == (512, 1024)
    assert draft["midlayer.self_attn.o_proj.weight"].shape == (512, 512)
    assert draft["midlayer.hidden_norm.weight"].fill is mw.Fill.ONES
    assert not any("embed" in name for name in draft)


def test_write_models_in_place_gives_zero_lm_heads(tmp_path: Path) -> None:
    """The full-size models, written into the folder that holds the configs (as on the node)."""
    for name in (mw.TARGET, mw.DRAFT):
        shutil.copytree(MODELS / name, tmp_path / name)
    before = (tmp_path / mw.DRAFT / "config.json").read_bytes()
    folders = mw.write_models(tmp_path, seed=0, source=tmp_path)
    assert [f.name for f in folders] == [mw.TARGET, mw.DRAFT]
    assert (tmp_path / mw.DRAFT / "config.json").read_bytes() == before
    for folder, vocab in ((folders[0], 32000), (folders[1], 8000)):
        path = folder / mw.WEIGHTS_FILE
        header = _check_layout(path)
        assert header["lm_head.weight"]["shape"] == [vocab, 512]
        assert _tensor_bytes(path, header, "lm_head.weight") == bytes(2 * vocab * 512)
    assert (folders[0] / mw.WEIGHTS_FILE).stat().st_size > 90_000_000


def test_loads_with_safetensors_where_installed(tmp_path: Path) -> None:
    torch_st = pytest.importorskip("safetensors.torch")
    out = tmp_path / "out"
    mw.main([str(out)])
    tensors = torch_st.load_file(str(out / mw.TARGET / mw.WEIGHTS_FILE))
    assert float(tensors["lm_head.weight"].abs().max()) == 0.0
    assert 0.015 < float(tensors["model.embed_tokens.weight"].abs().mean()) < 0.032


def test_tokenizer_is_trained_locally_and_loads_offline_with_its_chat_template(tmp_path: Path) -> None:
    pytest.importorskip("tokenizers")
    transformers = pytest.importorskip("transformers")
    from orchestrator.bench.textdata import Message, Role
    from orchestrator.bench.tokenizer import HfTokenizer

    folders = [tmp_path / "target", tmp_path / "draft"]
    for folder in folders:
        folder.mkdir()
    assert mw.write_tokenizer(folders, vocab_size=32000)
    tok = transformers.AutoTokenizer.from_pretrained(str(folders[0]), local_files_only=True)
    assert (tok.pad_token_id, tok.bos_token_id, tok.eos_token_id) == (0, 1, 2)  # as config.json says
    assert len(tok) <= 32000  # every id is inside the model's vocabulary
    turns = [{"role": "user", "content": "How often should I water a snake plant?"}]
    text = tok.apply_chat_template(turns, tokenize=False, add_generation_prompt=True)
    assert text == "<s><|user|>\nHow often should I water a snake plant?<|end|>\n<|assistant|>\n"
    ours = HfTokenizer(str(folders[1])).encode_chat([Message(Role.USER, turns[0]["content"])])
    assert ours == tok(text, add_special_tokens=False)["input_ids"]
    assert tok.decode(ours) == text


def test_h200_chat_spec_tokenizes_through_the_tiny_models_template(tmp_path: Path) -> None:
    pytest.importorskip("tokenizers")
    pytest.importorskip("transformers")
    import yaml

    from orchestrator.bench.traffic import check_workload
    from orchestrator.spec.sweep_spec import parse_spec

    model = tmp_path / "tiny-llama"
    model.mkdir()
    assert mw.write_tokenizer([model], vocab_size=32000)
    data = yaml.safe_load((MODELS.parent / "h200-chat.yaml").read_text())
    data["model"]["path"] = str(model)
    requests = check_workload(parse_spec(data))
    assert len(requests) == data["workload"]["num_prompts"]
    assert all(r.dataset == "generated-chat" and max(r.input_ids) < 32000 for r in requests)
    assert any(r.input_ids[0] == 1 for r in requests)  # <s> from the template where the prompt fits whole
