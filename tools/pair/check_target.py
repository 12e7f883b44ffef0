"""Check a converted model folder against the GGUF it came from.

    python -m tools.pair.check_target FOLDER GGUF

Three things must hold: the folder's tokenizer has the GGUF's vocabulary, id for id, and a chat
template; its logits on a fixed chat text, from the bf16 weights as saved, match the NumPy forward of the
dequantized GGUF (`gguf_reference`) within what bf16 rounding of the weights explains; and config.json
names what SGLang needs (``architectures``, ``rope_theta``).

The tolerance: rounding a weight to bf16 moves it by at most 2^-9 of itself, so each logit moves by
about that over the square root of the terms it sums: a relative RMS error of a few parts in a thousand,
and the top token the same almost everywhere. A wrong un-permutation of q/k (the usual converter bug) or a
wrong rope base gives errors of tens of percent.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tools.pair.gguf_reference import GgufLlama, gguf_tokens

# A fixed user turn, sent through the model's own chat template.
FIXED_MESSAGES = [{"role": "user", "content": "What is the capital of France? Answer in one sentence."}]

MAX_RELATIVE_RMS = 0.02  # ~5x the rounding bound above; a rope or layout bug is ~10x beyond it
MIN_TOP1_AGREEMENT = 0.95
MAX_MEAN_KL = 0.01


@dataclass
class CheckResult:
    """What the comparison measured, and whether each part passed."""

    tokens: int
    top1_agreement: float
    relative_rms: float
    max_abs_diff: float
    mean_kl: float
    vocab_matches: bool
    has_chat_template: bool
    config_ok: bool
    problems: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.problems

    def as_dict(self) -> dict[str, object]:
        return {**asdict(self), "passed": self.passed}


def compare_logits(reference: np.ndarray, candidate: np.ndarray) -> tuple[float, float, float, float]:
    """Top-1 agreement, relative RMS error, max |difference| and mean KL(reference || candidate)."""
    ref = reference.astype(np.float64)
    cand = candidate.astype(np.float64)
    top1 = float(np.mean(ref.argmax(-1) == cand.argmax(-1)))
    rel = float(np.sqrt(np.mean((ref - cand) ** 2)) / np.sqrt(np.mean(ref**2)))
    max_abs = float(np.max(np.abs(ref - cand)))
    log_p = ref - _logsumexp(ref)
    log_q = cand - _logsumexp(cand)
    kl = float(np.mean(np.sum(np.exp(log_p) * (log_p - log_q), axis=-1)))
    return top1, rel, max_abs, kl


def _logsumexp(x: np.ndarray) -> np.ndarray:
    m = x.max(axis=-1, keepdims=True)
    return np.asarray(m + np.log(np.exp(x - m).sum(axis=-1, keepdims=True)))


def folder_logits(folder: Path, ids: list[int]) -> np.ndarray:
    """The converted folder's logits: its bf16 weights as saved, computed in float32 on the CPU."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.bfloat16).float().eval()
    with torch.no_grad():
        out = model(torch.tensor([ids])).logits[0]
    return np.asarray(out.float().numpy())


def chat_ids(tokenizer: Any, messages: list[dict[str, str]]) -> list[int]:
    """Token ids of ``messages`` through the chat template, with the assistant's turn opened.

    Rendered to text first, then encoded without special tokens added: the template already writes
    them, and ``apply_chat_template(tokenize=True)`` returns a list in some transformers releases and
    a batch encoding in others.
    """
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return [int(i) for i in tokenizer(text, add_special_tokens=False)["input_ids"]]


def check(folder: Path, gguf_path: Path, messages: list[dict[str, str]] | None = None) -> CheckResult:
    from transformers import AutoTokenizer

    problems: list[str] = []
    tokenizer = AutoTokenizer.from_pretrained(folder)
    reference = GgufLlama(gguf_path)
    tokens = gguf_tokens(reference.reader)
    vocab = tokenizer.get_vocab()
    vocab_matches = len(vocab) == len(tokens) and all(vocab.get(t) == i for i, t in enumerate(tokens))
    if not vocab_matches:
        problems.append(f"tokenizer vocabulary ({len(vocab)}) differs from the GGUF's ({len(tokens)})")
    has_template = bool(getattr(tokenizer, "chat_template", None))
    if not has_template:
        problems.append("the tokenizer has no chat template")
    config = json.loads((folder / "config.json").read_text())
    config_ok = bool(config.get("architectures")) and "rope_theta" in config
    if not config_ok:
        problems.append("config.json lacks architectures or rope_theta")
    chat = messages or FIXED_MESSAGES
    ids = chat_ids(tokenizer, chat)
    top1, rel, max_abs, kl = compare_logits(reference.logits(ids), folder_logits(folder, ids))
    if top1 < MIN_TOP1_AGREEMENT:
        problems.append(f"top-1 agreement {top1:.3f} < {MIN_TOP1_AGREEMENT}")
    if rel > MAX_RELATIVE_RMS:
        problems.append(f"relative RMS error {rel:.4f} > {MAX_RELATIVE_RMS}")
    if kl > MAX_MEAN_KL:
        problems.append(f"mean KL {kl:.5f} > {MAX_MEAN_KL}")
    return CheckResult(
        tokens=len(ids),
        top1_agreement=top1,
        relative_rms=rel,
        max_abs_diff=max_abs,
        mean_kl=kl,
        vocab_matches=vocab_matches,
        has_chat_template=has_template,
        config_ok=config_ok,
        problems=problems,
    )


def report_lines(result: CheckResult) -> list[str]:
    verdict = "PASS" if result.passed else "FAIL: " + "; ".join(result.problems)
    return [
        f"logits on {result.tokens} tokens against the GGUF's NumPy forward: top-1 agreement "
        f"{result.top1_agreement:.3f}, relative RMS error {result.relative_rms:.4f}, "
        f"max |diff| {result.max_abs_diff:.3f}, mean KL {result.mean_kl:.2e}",
        f"vocabulary id for id: {result.vocab_matches}; chat template: {result.has_chat_template}; "
        f"config.json architectures and rope_theta: {result.config_ok}",
        f"check: {verdict}",
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.pair.check_target", description=__doc__.split("\n")[0]
    )
    parser.add_argument("folder", type=Path)
    parser.add_argument("gguf", type=Path)
    args = parser.parse_args(argv)
    result = check(args.folder, args.gguf)
    for line in report_lines(result):
        print(line)
    return 0 if result.passed else 1


if __name__ == "__main__":
    sys.exit(main())
