"""What the simulated server reads from a prompt: whether it is text, and its greedy continuation.

A draft model predicts text it was trained on, not random ids, so acceptance depends on the prompt.
The node sees only ids, so it tells text from random ids the way the ids themselves differ: text
repeats its tokens (function words, punctuation, the chat template's markers) far more than ids
drawn uniformly from a vocabulary. A prompt with clearly fewer distinct ids than a uniform draw of the
same length over the same id range would give is text: its repeats exceed the expected number of
chance collisions by more than chance allows (three standard deviations, the collisions being about
Poisson). This needs no vocabulary, so it holds for the
built-in tokenizer and for a real model's alike.

At temperature 0 a real server's output is a function of the prompt, so the simulated output is too:
a generator seeded by the prompt's ids. Speculation must not change it; a profile with ``lossy_rate``
above 0 makes a speculative step emit a wrong token now and then, so the lossless check has something
to catch.

Asked for the top two log-probabilities (`top_two`), the node scores each output position from a hash
of the prompt and the position: about one position in eight is a near tie (margin under 0.125 nats),
the rest confident. The second choice is always the chosen token + 2, never the + 1 a lossy step
emits, so a lossy token is never the baseline's second choice and the check still calls it lossy.
With ``near_tie_flips`` a speculative server emits that second choice at every near tie, as bf16
numerics in a real verify pass can: a difference the check must not call lossy.
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Sequence
from enum import StrEnum
from typing import Any

from orchestrator.config.draft_tree import DraftTree
from orchestrator.sim.profile import SimProfile
from orchestrator.sim.speed import position_probs

MIN_TEXT_TOKENS = 8  # below this, repetition says too little to call a prompt text


class PromptKind(StrEnum):
    RANDOM = "random"
    TEXT = "text"


def prompt_kind(ids: Sequence[int]) -> PromptKind:
    """TEXT when the prompt repeats its ids well beyond what uniform random ids would."""
    n = len(ids)
    if n < MIN_TEXT_TOKENS:
        return PromptKind.RANDOM
    span = max(ids) + 1
    expected_distinct = span * (1.0 - (1.0 - 1.0 / span) ** n) if span > 1 else 1.0
    chance = n - expected_distinct  # repeats a uniform draw would show
    repeats = n - len(set(ids))
    return PromptKind.TEXT if repeats > chance + 3.0 * chance**0.5 + 1.5 else PromptKind.RANDOM


def probs_by_kind(
    profile: SimProfile, tree: DraftTree | None, *, broken: bool
) -> dict[PromptKind, list[float]]:
    """Each kind's per-position acceptance; text uses the profile's text figures where it has them."""
    if tree is None:
        return {kind: [] for kind in PromptKind}
    text = profile.model_copy(
        update={
            "accept_p0": profile.text_accept_p0 if profile.text_accept_p0 is not None else profile.accept_p0,
            "accept_decay": (
                profile.text_accept_decay if profile.text_accept_decay is not None else profile.accept_decay
            ),
        }
    )
    return {
        PromptKind.RANDOM: position_probs(profile, tree, broken=broken),
        PromptKind.TEXT: position_probs(text, tree, broken=broken),
    }


RUNNER_UP_OFFSET = 2  # the second choice is the chosen token + 2 (a lossy step emits + 1)


def prompt_key(ids: Sequence[int]) -> int:
    """A prompt's hash: what its output positions' margins are drawn from."""
    return zlib.crc32(b"".join(i.to_bytes(4, "little", signed=False) for i in ids if 0 <= i < 1 << 32))


def margin_at(key: int, position: int) -> float:
    """The top-two margin (nats) of an output position: a near tie (0.01 to 0.1) one time in eight."""
    h = zlib.crc32(f"{key}:{position}".encode())
    return 0.01 * (1 + (h >> 3) % 10) if h % 8 == 0 else 2.0 + (h >> 3) % 400 / 100


def is_near_tie(key: int, position: int) -> bool:
    return margin_at(key, position) < 0.125


def top_two(key: int, output_ids: Sequence[int], vocab: int) -> list[list[list[Any]]]:
    """``meta_info.output_top_logprobs`` as SGLang answers it: per position ``[logprob, id, text]``,
    best first (the chosen token first: the node is greedy)."""
    out = []
    for pos, tok in enumerate(output_ids):
        first = -0.05 - zlib.crc32(f"{key}/{pos}".encode()) % 100 / 100
        out.append(
            [[first, tok, None], [first - margin_at(key, pos), (tok + RUNNER_UP_OFFSET) % vocab, None]]
        )
    return out


def greedy_stream(ids: Sequence[int]) -> random.Random:
    """The generator of a prompt's greedy output: the same prompt always continues the same way."""
    data = b"".join(i.to_bytes(4, "little", signed=False) for i in ids if 0 <= i < 1 << 32)
    return random.Random(zlib.crc32(data) * 1_000_003 + len(ids))
