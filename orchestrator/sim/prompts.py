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
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Sequence
from enum import StrEnum

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


def greedy_stream(ids: Sequence[int]) -> random.Random:
    """The generator of a prompt's greedy output: the same prompt always continues the same way."""
    data = b"".join(i.to_bytes(4, "little", signed=False) for i in ids if 0 <= i < 1 << 32)
    return random.Random(zlib.crc32(data) * 1_000_003 + len(ids))
