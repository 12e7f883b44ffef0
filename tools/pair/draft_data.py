"""Training data for the draft: token sequences with a loss mask, the draft vocabulary, batches.

The data file is JSONL, one sequence per line, the target's own tokens (prompt, then the answer the target
generated for it):

    {"input_ids": [1, 2, 3, 4, 5], "loss_mask": [0, 0, 1, 1, 1]}
    {"input_ids": [1, 2, 3, 4, 5], "prompt_len": 2}

`loss_mask` marks the answer tokens (1), the ones the draft learns to propose; `prompt_len` is shorthand for
a mask of that many 0s then 1s. A line with both must agree.
"""

from __future__ import annotations

import json
import logging
import random
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import torch

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Sample:
    input_ids: tuple[int, ...]
    loss_mask: tuple[int, ...]

    def __post_init__(self) -> None:
        if len(self.input_ids) != len(self.loss_mask):
            raise ValueError(f"{len(self.input_ids)} ids but {len(self.loss_mask)} mask entries")


def parse_line(obj: dict[str, object]) -> Sample:
    ids = obj["input_ids"]
    if not isinstance(ids, list) or not all(isinstance(i, int) for i in ids):
        raise ValueError("input_ids must be a list of ints")
    mask: list[int] | None = None
    if "loss_mask" in obj:
        raw = obj["loss_mask"]
        if not isinstance(raw, list):
            raise ValueError("loss_mask must be a list")
        mask = [1 if m else 0 for m in raw]
    if "prompt_len" in obj:
        n = obj["prompt_len"]
        if not isinstance(n, int) or not 0 <= n <= len(ids):
            raise ValueError(f"prompt_len {n!r} outside 0..{len(ids)}")
        from_prompt = [0] * n + [1] * (len(ids) - n)
        if mask is not None and mask != from_prompt:
            raise ValueError("loss_mask and prompt_len disagree")
        mask = from_prompt
    if mask is None:
        raise ValueError("a line needs loss_mask or prompt_len")
    return Sample(tuple(ids), tuple(mask))


def read_jsonl(path: str | Path, max_len: int | None = None) -> list[Sample]:
    """Every line as a Sample, cut to max_len tokens; lines with fewer than 3 tokens are dropped (the draft
    predicts two tokens ahead of a position, so shorter sequences teach nothing)."""
    samples = []
    with open(path) as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                s = parse_line(json.loads(line))
            except (ValueError, KeyError, json.JSONDecodeError) as exc:
                raise ValueError(f"{path}:{n}: {exc}") from exc
            if max_len is not None:
                s = Sample(s.input_ids[:max_len], s.loss_mask[:max_len])
            if len(s.input_ids) >= 3:
                samples.append(s)
    log.info("read %d sequences from %s", len(samples), path)
    return samples


def split(samples: list[Sample], eval_fraction: float, seed: int) -> tuple[list[Sample], list[Sample]]:
    """A deterministic held-out part: the same seed and file give the same split."""
    order = list(range(len(samples)))
    random.Random(seed).shuffle(order)
    n_eval = round(len(samples) * eval_fraction) if len(samples) > 1 else 0
    held = set(order[:n_eval])
    kept = [s for i, s in enumerate(samples) if i not in held]
    return kept, [s for i, s in enumerate(samples) if i in held]


def draft_vocabulary(samples: Iterable[Sample], vocab_size: int, draft_vocab_size: int) -> torch.Tensor:
    """The draft's target ids, ascending: the most frequent answer tokens, as SpecForge picks them.

    Ties break towards the smaller id (SpecForge's Counter keeps first-seen order instead; sorting makes the
    choice independent of the data order). Short of distinct tokens, the smallest unused ids fill the rest.
    """
    counts: Counter[int] = Counter()
    for s in samples:
        counts.update(i for i, m in zip(s.input_ids, s.loss_mask, strict=True) if m)
    if any(not 0 <= i < vocab_size for i in counts):
        raise ValueError("a token id is outside the target vocabulary")
    ranked = sorted(counts, key=lambda i: (-counts[i], i))[:draft_vocab_size]
    chosen = set(ranked)
    filler = (i for i in range(vocab_size) if i not in chosen)
    while len(chosen) < draft_vocab_size:
        chosen.add(next(filler))
    total = sum(counts.values())
    covered = sum(counts[i] for i in ranked)
    log.info(
        "draft vocabulary: %d of %d distinct answer tokens, covering %.2f%% of answer tokens",
        min(len(counts), draft_vocab_size),
        len(counts),
        100.0 * covered / max(total, 1),
    )
    return torch.tensor(sorted(chosen), dtype=torch.int64)


def coverage(samples: Iterable[Sample], ids: torch.Tensor) -> float:
    """Share of answer tokens inside the draft vocabulary."""
    inside = set(ids.tolist())
    total = hit = 0
    for s in samples:
        for i, m in zip(s.input_ids, s.loss_mask, strict=True):
            if m:
                total += 1
                hit += i in inside
    return hit / max(total, 1)


@dataclass(frozen=True)
class Batch:
    input_ids: torch.Tensor  # [b, t] int64, right-padded with 0
    loss_mask: torch.Tensor  # [b, t] bool, False on padding
    lengths: torch.Tensor  # [b]

    def to(self, device: torch.device | str) -> Batch:
        return Batch(self.input_ids.to(device), self.loss_mask.to(device), self.lengths.to(device))


def collate(samples: list[Sample]) -> Batch:
    t = max(len(s.input_ids) for s in samples)
    ids = torch.zeros(len(samples), t, dtype=torch.int64)
    mask = torch.zeros(len(samples), t, dtype=torch.bool)
    for row, s in enumerate(samples):
        n = len(s.input_ids)
        ids[row, :n] = torch.tensor(s.input_ids)
        mask[row, :n] = torch.tensor(s.loss_mask, dtype=torch.bool)
    return Batch(ids, mask, torch.tensor([len(s.input_ids) for s in samples]))


def batches(
    samples: list[Sample], max_tokens: int, seed: int, epoch: int, shuffle: bool = True
) -> list[Batch]:
    """Batches of at most `max_tokens` padded tokens, in an order fixed by (seed, epoch).

    Sequences of similar length go together (sorted inside windows of 64 batches' worth) so that padding stays
    small; the windows and the batches are shuffled so that the order still varies between epochs.
    """
    rng = random.Random(f"{seed}:{epoch}")
    order = list(range(len(samples)))
    if shuffle:
        rng.shuffle(order)
    avg = max(1, sum(len(s.input_ids) for s in samples) // max(len(samples), 1))
    window = max(1, 64 * max(1, max_tokens // avg))
    groups: list[list[int]] = []
    for start in range(0, len(order), window):
        chunk = sorted(order[start : start + window], key=lambda i: len(samples[i].input_ids))
        current: list[int] = []
        longest = 0
        for i in chunk:
            n = len(samples[i].input_ids)
            if current and max(longest, n) * (len(current) + 1) > max_tokens:
                groups.append(current)
                current, longest = [], 0
            current.append(i)
            longest = max(longest, n)
        if current:
            groups.append(current)
    if shuffle:
        rng.shuffle(groups)
    return [collate([samples[i] for i in g]) for g in groups]
