"""The workload warnings printed before a sweep starts: a spec that is valid but measures less than it looks.

Both are advice, not errors (each has a legitimate use); the CLI prints them under the spec's summary.
"""

from __future__ import annotations

from orchestrator.spec.sweep_spec import MIN_STAGE_S, MIN_STAGE_TOKENS, Backend, SweepSpec


def few_prompts_warning(spec: SweepSpec) -> str:
    """A warning when a stage has fewer prompts than requests in flight ('' if not): legitimate where the
    stage cycles its prompts, but then the same prompt runs several times at once (the prefix cache serves
    its copies), and a stage that makes one pass never reaches that concurrency."""
    wl = spec.workload
    heaviest = max(wl.concurrency)
    if wl.num_prompts >= heaviest:
        return ""
    return (
        f"warning: workload.num_prompts {wl.num_prompts} is below the highest concurrency ({heaviest}): a "
        f"stage holds at most {wl.num_prompts} different requests, so at concurrency {heaviest} the same "
        f"prompts run several times at once; give workload.num_prompts of at least {heaviest}"
    )


def short_stage_warning(spec: SweepSpec) -> str:
    """One warning naming the workload keys when stages may be too short for real hardware ('' if not,
    and '' on the simulated node, which has no ramp-up to outlast)."""
    if spec.backend is Backend.SIMULATED:
        return ""
    wl = spec.workload
    short = []
    if wl.min_stage_s < MIN_STAGE_S:
        short.append(f"workload.min_stage_s is {wl.min_stage_s:g} (real hardware needs {MIN_STAGE_S:g})")
    if wl.min_stage_tokens < MIN_STAGE_TOKENS and wl.num_prompts * wl.output_len < MIN_STAGE_TOKENS:
        short.append(
            f"workload.min_stage_tokens is {wl.min_stage_tokens} (real hardware needs {MIN_STAGE_TOKENS})"
        )
    if not short:
        return ""
    return (
        "warning: stages may be too short to measure steady throughput: " + "; ".join(short) + ". "
        "Short stages measure their ramp-up and move by about 15 % between repeats; "
        "remove these keys (or raise them) for a sweep on real GPUs."
    )
