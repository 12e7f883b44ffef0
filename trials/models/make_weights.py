#!/usr/bin/env python3
"""Write `model.safetensors` for the tiny Llama target and its EAGLE-3 draft (configs beside this file).

    python3 trials/models/make_weights.py OUT_DIR [--seed N]

writes OUT_DIR/tiny-llama/ and OUT_DIR/tiny-llama-eagle3/, each with its config.json and weights
(about 92 MB and 18 MB of bf16). OUT_DIR may be this folder itself. The weights are small random
values except that both lm_heads are zero: every logit is then 0, greedy decoding picks token 0 in
the target and in the draft alike, and the target accepts every draft token (an acceptance length
of num_draft_tokens, 4.0 with 4 draft tokens). With `--load-format dummy` instead, the draft never
agrees with the target and the acceptance length is about 1.0.

Each folder also gets a real tokenizer (tokenizer.json and tokenizer_config.json with a chat
template), so text can be sent through the model's own template: a byte-level BPE trained with the
`tokenizers` library on the project's generated chat conversations (nothing is downloaded), its
special tokens first so that <pad>, <s> and </s> have the ids the configs name (0, 1, 2). Without the
`tokenizers` package the weights are still written and the tokenizer is skipped with a note.

The weights need the standard library only, so they can be written on a GPU node that has nothing
installed for them: the safetensors
file (8-byte little-endian header length, JSON header, raw little-endian tensor bytes) is written
by hand, and the random values are bf16 bit patterns built from random bytes: a random sign and
mantissa over a fixed exponent, so every value has a magnitude in [1/64, 1/32).
"""

from __future__ import annotations

import argparse
import enum
import json
import random
import shutil
import struct
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
TARGET = "tiny-llama"
DRAFT = "tiny-llama-eagle3"
WEIGHTS_FILE = "model.safetensors"

# bf16, little-endian: byte 0 is the low exponent bit and 7 mantissa bits, byte 1 the sign and the
# high 7 exponent bits. Exponent 121 (2**-6): random bytes become values in +-[1/64, 1/32).
_EXPONENT = 121
_LOW_BYTE = bytes(((_EXPONENT & 1) << 7) | (b & 0x7F) for b in range(256))
_HIGH_BYTE = bytes((b & 0x80) | (_EXPONENT >> 1) for b in range(256))
_BF16_ONE = b"\x80\x3f"  # 0x3F80
_BF16_ZERO = b"\x00\x00"
_CHUNK_ELEMENTS = 1 << 22  # random tensors are generated and written 8 MiB at a time


class Fill(enum.Enum):
    RANDOM = "random"
    ONES = "ones"
    ZEROS = "zeros"


@dataclass(frozen=True)
class TensorSpec:
    name: str
    shape: tuple[int, ...]
    fill: Fill

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


def _attention_and_mlp(prefix: str, cfg: dict[str, Any], in_features: int) -> list[TensorSpec]:
    h, inter = cfg["hidden_size"], cfg["intermediate_size"]
    head_dim = cfg.get("head_dim", h // cfg["num_attention_heads"])
    q_out = cfg["num_attention_heads"] * head_dim
    kv_out = cfg["num_key_value_heads"] * head_dim
    r = Fill.RANDOM
    return [
        TensorSpec(f"{prefix}self_attn.q_proj.weight", (q_out, in_features), r),
        TensorSpec(f"{prefix}self_attn.k_proj.weight", (kv_out, in_features), r),
        TensorSpec(f"{prefix}self_attn.v_proj.weight", (kv_out, in_features), r),
        TensorSpec(f"{prefix}self_attn.o_proj.weight", (h, q_out), r),
        TensorSpec(f"{prefix}mlp.gate_proj.weight", (inter, h), r),
        TensorSpec(f"{prefix}mlp.up_proj.weight", (inter, h), r),
        TensorSpec(f"{prefix}mlp.down_proj.weight", (h, inter), r),
        TensorSpec(f"{prefix}input_layernorm.weight", (h,), Fill.ONES),
        TensorSpec(f"{prefix}post_attention_layernorm.weight", (h,), Fill.ONES),
    ]


def target_tensors(cfg: dict[str, Any]) -> list[TensorSpec]:
    """LlamaForCausalLM with an untied, zero lm_head."""
    h, vocab = cfg["hidden_size"], cfg["vocab_size"]
    specs = [
        TensorSpec("model.embed_tokens.weight", (vocab, h), Fill.RANDOM),
        TensorSpec("model.norm.weight", (h,), Fill.ONES),
        TensorSpec("lm_head.weight", (vocab, h), Fill.ZEROS),
    ]
    for i in range(cfg["num_hidden_layers"]):
        specs += _attention_and_mlp(f"model.layers.{i}.", cfg, h)
    return specs


def draft_tensors(cfg: dict[str, Any]) -> list[TensorSpec]:
    """LlamaForCausalLMEagle3 (SGLang's names): `fc` fuses the target's auxiliary hidden states, the
    one `midlayer` attends over [embedding, hidden] (twice the width), and the lm_head (zero) covers
    the draft vocabulary. No embedding: SGLang shares the target's."""
    h = cfg["hidden_size"]
    aux = len(cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"])
    specs = [
        TensorSpec("fc.weight", (h, aux * cfg["target_hidden_size"]), Fill.RANDOM),
        TensorSpec("norm.weight", (h,), Fill.ONES),
        TensorSpec("lm_head.weight", (cfg["draft_vocab_size"], h), Fill.ZEROS),
        TensorSpec("midlayer.hidden_norm.weight", (h,), Fill.ONES),
    ]
    return specs + _attention_and_mlp("midlayer.", cfg, 2 * h)


def _random_bf16(rng: random.Random, n: int) -> bytes:
    buf = bytearray(2 * n)
    buf[0::2] = rng.randbytes(n).translate(_LOW_BYTE)
    buf[1::2] = rng.randbytes(n).translate(_HIGH_BYTE)
    return bytes(buf)


def _tensor_chunks(spec: TensorSpec, rng: random.Random) -> Iterable[bytes]:
    left = spec.numel
    while left:
        n = min(left, _CHUNK_ELEMENTS)
        if spec.fill is Fill.RANDOM:
            yield _random_bf16(rng, n)
        else:
            yield (_BF16_ONE if spec.fill is Fill.ONES else _BF16_ZERO) * n
        left -= n


def safetensors_header(specs: Sequence[TensorSpec]) -> bytes:
    """The length prefix and JSON header for bf16 tensors laid out in the order given, padded with
    spaces to 8 bytes so that the data that follows is aligned."""
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for spec in specs:
        size = 2 * spec.numel
        header[spec.name] = {
            "dtype": "BF16",
            "shape": list(spec.shape),
            "data_offsets": [offset, offset + size],
        }
        offset += size
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw


def write_safetensors(path: Path, specs: Sequence[TensorSpec], rng: random.Random) -> None:
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise ValueError(f"duplicate tensor names in {names}")
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("wb") as f:
        f.write(safetensors_header(specs))
        for spec in specs:
            for chunk in _tensor_chunks(spec, rng):
                f.write(chunk)
    tmp.replace(path)  # a half-written file must never look like a model


def read_header(path: Path) -> dict[str, Any]:
    """The JSON header of a safetensors file (for checks; the loaders validate the rest)."""
    with path.open("rb") as f:
        (length,) = struct.unpack("<Q", f.read(8))
        header: dict[str, Any] = json.loads(f.read(length))
    return header


def write_models(out_dir: Path, seed: int = 0, source: Path = HERE) -> list[Path]:
    """Write both models under `out_dir` (configs copied from `source`); returns their folders."""
    rng = random.Random(seed)
    written = []
    for name, make in ((TARGET, target_tensors), (DRAFT, draft_tensors)):
        src_cfg = source / name / "config.json"
        folder = out_dir / name
        folder.mkdir(parents=True, exist_ok=True)
        dst_cfg = folder / "config.json"
        if not (dst_cfg.exists() and dst_cfg.samefile(src_cfg)):
            shutil.copyfile(src_cfg, dst_cfg)
        cfg = json.loads(src_cfg.read_text())
        write_safetensors(folder / WEIGHTS_FILE, make(cfg), rng)
        written.append(folder)
    return written


SPECIAL_TOKENS = ("<pad>", "<s>", "</s>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>")
# Each turn is "<|role|>\ncontent<|end|>\n"; the generation prompt is the assistant's marker.
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}<|{{ message['role'] }}|>\n"
    "{{ message['content'] }}<|end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


def training_text(conversations: int = 2000) -> list[str]:
    """Generated chat text (the project's own generator), one turn per line, to train the BPE on."""
    sys.path.insert(0, str(HERE.parents[1]))
    from orchestrator.bench.chatgen import generated_chat

    lines = []
    for conv in generated_chat(conversations, seed=0):
        lines += [m.content for m in conv.messages]
        lines.append(conv.answer or "")
    return lines


def write_tokenizer(folders: Sequence[Path], vocab_size: int) -> bool:
    """Train the tokenizer and save it into each folder; False when `tokenizers` is not installed."""
    try:
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    except ImportError:
        return False
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),  # any text encodes, no unknown token
        show_progress=False,
    )
    tok.train_from_iterator(training_text(), trainer=trainer)
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<s>",
        "eos_token": "</s>",
        "pad_token": "<pad>",
        "add_bos_token": False,  # the chat template writes it
        "model_max_length": 4096,
        "chat_template": CHAT_TEMPLATE,
    }
    for folder in folders:
        tok.save(str(folder / "tokenizer.json"))
        (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
    return True


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("out_dir", type=Path, help="folder that receives tiny-llama/ and tiny-llama-eagle3/")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    folders = write_models(args.out_dir, args.seed)
    for folder in folders:
        size = (folder / WEIGHTS_FILE).stat().st_size
        print(f"{folder / WEIGHTS_FILE}: {size / 1e6:.1f} MB")  # CLI output
    vocab = json.loads((folders[0] / "config.json").read_text())["vocab_size"]
    if write_tokenizer(folders, vocab):
        print(f"tokenizer (byte-level BPE, chat template) in {', '.join(str(f) for f in folders)}")
    else:
        print("tokenizer skipped: the 'tokenizers' package is not installed (pip install tokenizers)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
