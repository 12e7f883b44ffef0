"""Would SGLang retract requests when `requests` identical ones arrive at once on a KV pool of `pool`
tokens? The scheduler's admission and retraction rules, replayed without serving anything.

SGLang admits a waiting request while the pool holds its prompt plus ``new_token_ratio`` of what every
running request will still generate; the ratio starts at 0.7 and decays each decode step (so later
admissions reserve less), and before each step it retracts when the pool cannot give every running
request its step's tokens (the speculative draft tokens). This is what the trial's KV probe measures
(``node.trial_load.kv_probe``); the memory prior uses it to skip a configuration that would only be
marked ``kv_pressure``. The acceptance length is not known before a launch: the replay assumes the
slowest growth that still finishes (one token a step, as a dummy draft), which retracts the most.
"""

from __future__ import annotations

import math

from orchestrator.footprint.sglang_defaults import (
    INIT_NEW_TOKEN_RATIO,
    MIN_NEW_TOKEN_RATIO,
    NEW_TOKEN_RATIO_DECAY,
)


def retracts(
    pool: int, requests: int, input_len: int, output_len: int, per_step: int, gain: float = 1.0
) -> bool:
    ratio = INIT_NEW_TOKEN_RATIO
    waiting = requests
    running: list[list[float]] = []  # [KV tokens held, tokens generated]
    while waiting or running:
        used = sum(r[0] for r in running)
        budget = pool - used - sum(math.ceil((output_len - r[1]) * ratio) for r in running)
        while waiting:
            need = input_len + math.ceil(output_len * ratio)
            if need > budget and (running or input_len + 1 > pool - used):
                break
            running.append([float(input_len + 1), 1.0])
            budget -= need
            used += input_len + 1
            waiting -= 1
        if not running:
            return True  # not even one prompt fits
        if used + len(running) * per_step > pool and len(running) > 1:
            return True
        for r in running:
            step = min(gain, output_len - r[1])
            r[0] += step
            r[1] += step
        running = [r for r in running if r[1] < output_len]
        ratio = max(MIN_NEW_TOKEN_RATIO, ratio - NEW_TOKEN_RATIO_DECAY)
    return False
