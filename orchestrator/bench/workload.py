"""Synthetic prompts for a benchmark stage, shaped like the "random" dataset of SGLang's bench_serving.

Prompts are token ids, not text: the server can run with ``--skip-tokenizer-init`` and no tokenizer is
needed here. Ids are drawn at random (not bench_serving's consecutive ``offset + i + j`` run), so no two
prompts share a prefix and the radix cache cannot make one configuration look faster than another.
"""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class RequestSpec:
    """One request of a stage: the prompt's token ids and how many tokens to generate (EOS ignored)."""

    input_ids: tuple[int, ...]
    max_new_tokens: int
    dataset: str = "random"  # which dataset of the workload it came from, for per-dataset figures


def synthetic_requests(
    num_prompts: int,
    input_len: int,
    output_len: int,
    vocab_size: int,
    seed: int,
    range_ratio: float = 1.0,
) -> list[RequestSpec]:
    """``num_prompts`` requests with random token ids, the same for the same arguments.

    As in bench_serving, each prompt's length is drawn uniformly from
    ``[max(int(input_len * range_ratio), 1), input_len]`` and each output length from
    ``[int(output_len * range_ratio), output_len]``; ``range_ratio=1.0`` gives fixed lengths. Unlike
    bench_serving, an output length is never 0 (a request that generates nothing measures nothing).

    Raises ValueError, naming the field, when no workload can be made from the arguments.
    """
    _check_at_least("num_prompts", num_prompts, 1)
    _check_at_least("input_len", input_len, 1)
    _check_at_least("output_len", output_len, 1)
    _check_at_least("vocab_size", vocab_size, 2)
    if not 0.0 <= range_ratio <= 1.0:
        raise ValueError(f"range_ratio must lie in [0, 1], got {range_ratio}")

    rng = random.Random(seed)
    min_in = max(int(input_len * range_ratio), 1)
    min_out = max(int(output_len * range_ratio), 1)
    vocab = range(vocab_size)
    requests = []
    for _ in range(num_prompts):
        n_in = rng.randint(min_in, input_len)
        n_out = rng.randint(min_out, output_len)
        # choices() on a range is about twice as fast as a randrange() loop, which matters for
        # thousands of prompts of thousands of tokens.
        requests.append(RequestSpec(input_ids=tuple(rng.choices(vocab, k=n_in)), max_new_tokens=n_out))
    return requests


def _check_at_least(name: str, value: int, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {value}")
