"""What the sweep learned about speculation per load: the best setting at each concurrency level, and the
runtime policy to launch with.

The best number of draft steps falls as the batch grows (a verify over more tokens costs more once
the batch is compute bound), so one fixed setting is a compromise. Each concurrency level's best is
read from the stages of the trials that completed; the policy is the best trial's own adaptive tiers
when it ran adaptive, else its fixed setting plus, when the levels disagree, the adaptive tiers those
levels suggest (marked as not measured: a sweep that searches ``speculative_adaptive`` measures them).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from orchestrator.config.adaptive import CONFIG_FILE, AdaptiveMode, tiers_of
from orchestrator.config.fields import SPECULATIVE_FIELDS, SearchedField
from orchestrator.driver.answer.choose import clearly_ahead
from orchestrator.driver.answer.noise import Noise
from orchestrator.records import ServerConfig, TrialRecord, TrialStatus


def _setting(config: ServerConfig) -> dict[str, Any]:
    """The speculative values under their searched names (steps 0 and adaptive "off" for none)."""
    setting: dict[str, Any] = {f.value: getattr(config, f.value) for f in SPECULATIVE_FIELDS}
    setting[SearchedField.SPECULATIVE_NUM_STEPS] = config.speculative_num_steps or 0
    setting[SearchedField.SPECULATIVE_ADAPTIVE] = config.speculative_adaptive or AdaptiveMode.OFF.value
    return setting


def best_by_concurrency(
    records: Sequence[TrialRecord], answer: ServerConfig | None = None, noise: Noise | None = None
) -> list[dict[str, Any]]:
    """For each concurrency level measured, the configuration whose launches were fastest there.

    A configuration's figure at a level is the median of its launches' stages there, as the answer's is
    (the fastest single stage would be the luckiest launch of whichever configuration was launched most);
    the trial named is its launch whose stage measured that median. Given the sweep's ``answer`` and the
    ``noise`` its verdict used, a level is judged as the answer was: the answer's configuration stays the
    level's best unless another is clearly ahead of it there. The highest median alone named, under the
    demo's answer, a tree 0.03 % ahead at every level (a 3 % noise), and suggested tiers from such draws."""
    stages: dict[int, dict[ServerConfig, list[tuple[float, TrialRecord, float | None]]]] = {}
    for rec in records:
        if rec.result.status is not TrialStatus.OK:
            continue
        for stage in rec.result.stages:
            if stage.completed > 0:
                by_config = stages.setdefault(stage.concurrency, {})
                by_config.setdefault(rec.result.config, []).append(
                    (stage.output_tok_per_s, rec, stage.accept_length)
                )
    out = []
    for level, by_config in sorted(stages.items()):
        medians = {c: statistics.median(tok for tok, _, _ in runs) for c, runs in by_config.items()}
        top = config = max(medians, key=lambda c: medians[c])
        if answer in medians and noise is not None:
            limit = noise.gap_noise(len(by_config[config]), len(by_config[answer]))
            if not clearly_ahead(medians[config], medians[answer], limit):
                config = answer
        _, rec, accept = _nearest(by_config[config], medians[config])
        # The answer held a level another configuration measured higher at: said, or the line reads as the
        # level's highest figure (the real pair's s4k1d5 at 534 tok/s, the server without speculation 644).
        higher: dict[str, Any] = {}
        if top != config:
            _, top_rec, _ = _nearest(by_config[top], medians[top])
            higher = {
                "higher_config": top.label(),
                "higher_speculative": top.speculative,
                "higher_tok_per_s": medians[top],
                "higher_launches": len(by_config[top]),
                "higher_trial": top_rec.number,
            }
        out.append(
            {
                "concurrency": level,
                "trial": rec.number,
                "output_tok_per_s": medians[config],  # unrounded: printed as the answer's median is
                "launches": len(by_config[config]),
                "accept_length": None if accept is None else round(accept, 3),
                "config": config.label(),
                # another configuration than the answer: the answer's own figure here, to say by how much
                "answer_tok_per_s": medians[answer] if answer in medians and config != answer else None,
                **higher,
                **_setting(config),
            }
        )
    return out


def _nearest(
    runs: Sequence[tuple[float, TrialRecord, float | None]], median: float
) -> tuple[float, TrialRecord, float | None]:
    """The launch whose figure is nearest the configuration's median there: the one a level names."""
    return min(runs, key=lambda run: abs(run[0] - median))


def runtime_policy(best: TrialRecord, levels: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The speculation policy to launch with, for ``best.json``."""
    config = best.result.config
    tiers = tiers_of(config)
    if tiers is not None:
        policy: dict[str, Any] = {
            "speculative_adaptive": config.speculative_adaptive,
            "measured": True,
            "candidate_steps_by_batch": tiers,
        }
        if config.speculative_adaptive == "tiers":
            policy["config_file"] = CONFIG_FILE
        return policy
    policy = {"speculative_adaptive": "off", "measured": True, **_setting(config)}
    steps = {
        lv["concurrency"]: lv["speculative_num_steps"]
        for lv in levels
        if lv["speculative_eagle_topk"] in (1, None)
    }
    if len(set(steps.values())) > 1:
        policy["suggested_adaptive_config"] = _tiers_from_levels(steps)
        policy["suggested_note"] = (
            "the best steps differ by concurrency; these tiers follow them but were not measured: "
            "add 'tiers' or 'default' to search.speculative_adaptive to measure adaptive speculation"
        )
    return policy


def _tiers_from_levels(steps: dict[int, int]) -> dict[str, dict[str, Any]]:
    """Bucket keys at the measured levels (at least SGLang's smallest, 1), each offering its level's
    best steps and the next lighter level's, so the bucket can move between them."""
    levels = sorted(steps)
    keys = sorted({1, *levels} if levels[0] > 1 else set(levels))
    out = {}
    for key in keys:
        at = [lv for lv in levels if lv <= key] or [levels[0]]
        near = {steps[at[-1]], steps[at[-2]] if len(at) > 1 else steps[at[-1]]}
        out[str(key)] = {"candidate_steps": sorted(near), "up_hysteresis": 0.0, "down_hysteresis": 0.0}
    return out
