"""The simulated server's ``--speculative-adaptive``: steps chosen at run time per running-batch bucket.

As SGLang 0.5.17 does it: each bucket ("1", "8", "32", "64": a batch uses the largest key not above
it) keeps a moving average of the drafts accepted per request and, after a warm-up and then every few
verify steps, moves to the next candidate up when the average is above the current steps minus a half,
or down while it is at or below the lower candidate minus a half (shifted by the bucket's hysteresis).
A step count of 0 is plain decoding. The thresholds and defaults follow SGLang's
``adaptive_spec_params.py``; the code is the simulator's own.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.config.adaptive import FIRST_VERSION, SGLANG_DEFAULT, bucket_key
from orchestrator.engines.sglang.command import parse_version
from orchestrator.errors import SpecsweepError

EMA_ALPHA = 0.2
WARMUP_STEPS = 10
UPDATE_INTERVAL = 5


class TierConfigError(SpecsweepError, ValueError):
    """An adaptive config SGLang would refuse; the message is SGLang's."""


def load_tier_config(path: str | None) -> dict[str, dict[str, Any]]:
    """The per-bucket tiers from a config file, or SGLang's defaults without one."""
    if path is None:
        return SGLANG_DEFAULT
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as err:
        raise TierConfigError(f"cannot read speculative adaptive config {path}: {err}") from None
    if not isinstance(data, dict):
        raise TierConfigError(f"speculative adaptive config must be a JSON object, got {type(data).__name__}")
    buckets = {}
    for key, entry in data.items():
        if not key.isdigit():
            continue
        steps = entry.get("candidate_steps") if isinstance(entry, dict) else None
        if not isinstance(steps, list) or not steps or not all(isinstance(s, int) and s >= 0 for s in steps):
            raise TierConfigError(
                f"BS {key}: candidate_steps must be a list of non-negative ints, got {steps!r}"
            )
        buckets[key] = entry
    if not buckets:
        raise TierConfigError(
            "speculative_adaptive_config must contain at least one integer-string BS key, "
            f'e.g. {{"1": {{"candidate_steps": [1,3,7]}}}}. Got keys: {list(data)}'
        )
    return buckets


def adaptive_refusal(
    enabled: bool, config_path: str | None, version: str, algo: str | None, topk: int | None
) -> str:
    """What SGLang prints when it refuses these flags ('' when it takes them): before 0.5.17 it has no
    such flags, and 0.5.17 supports adaptive speculation with top-k 1 only."""
    if parse_version(version) < FIRST_VERSION:
        flag = "--speculative-adaptive" if enabled else "--speculative-adaptive-config"
        return f"launch_server.py: error: unrecognized arguments: {flag}\n"
    if not enabled:
        return ""
    if algo is not None and topk != 1:
        return (
            "ValueError: --speculative-adaptive is not supported with "
            f"speculative_eagle_topk={topk} (only topk=1 is supported)\n"
        )
    try:
        load_tier_config(config_path)
    except TierConfigError as err:
        return f"ValueError: {err}\n"
    return ""


@dataclass
class _Slot:
    candidates: list[int]
    up: float
    down: float
    current: int
    ema: float = 0.0
    count: int = 0

    def observe(self, accepted: list[int]) -> bool:
        if self.current > 0 and accepted:
            self.ema = (1 - EMA_ALPHA) * self.ema + EMA_ALPHA * sum(accepted) / len(accepted)
        self.count += 1
        if self.count <= WARMUP_STEPS or (self.count - WARMUP_STEPS) % UPDATE_INTERVAL:
            return False
        i = self.candidates.index(self.current)
        if self.current == 0:  # nothing was drafted: probe the next tier up
            i = min(i + 1, len(self.candidates) - 1)
        else:
            moved_down = False
            while i > 0 and self.ema <= self._drop_threshold(self.candidates[i - 1]):
                i -= 1
                moved_down = True
            while (
                not moved_down
                and i < len(self.candidates) - 1
                and self.ema > self.candidates[i] - 0.5 + self.up
            ):
                i += 1
        changed = self.candidates[i] != self.current
        self.current = self.candidates[i]
        return changed

    def _drop_threshold(self, lower: int) -> float:
        # Zero accepted drafts is low enough to reach a 0-step (no drafting) floor.
        return (0.5 if lower == 0 else lower - 0.5) + self.down


@dataclass
class TierController:
    """Which steps a batch of a given size runs with, updated from what the verifies accepted."""

    config: dict[str, dict[str, Any]]
    launch_steps: int
    slots: dict[str, _Slot] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for key, entry in self.config.items():
            candidates = sorted(set(entry["candidate_steps"]))
            start = self.launch_steps if self.launch_steps in candidates else candidates[len(candidates) // 2]
            self.slots[key] = _Slot(
                candidates,
                float(entry.get("up_hysteresis", 0.0)),
                float(entry.get("down_hysteresis", 0.0)),
                start,
                ema=float(start - 1),
            )

    @property
    def candidate_steps(self) -> list[int]:
        return sorted({s for slot in self.slots.values() for s in slot.candidates})

    def steps_for(self, batch: int) -> int:
        return self.slots[bucket_key(self.config, batch)].current

    def observe(self, batch: int, accepted: list[int]) -> str | None:
        """Feed one verify step; the log line SGLang prints when the bucket's steps change."""
        slot = self.slots[bucket_key(self.config, batch)]
        old = slot.current
        if not slot.observe(accepted):
            return None
        return f"Adaptive spec params updated: steps {old} -> {slot.current} (ema_accept_len={slot.ema:.2f})"
