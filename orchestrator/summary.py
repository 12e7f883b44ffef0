"""The end of a sweep: the table of trials and the best configuration with its launch command."""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from orchestrator.adaptive import CONFIG_FILE
from orchestrator.policy import best_by_concurrency, runtime_policy
from orchestrator.records import TrialStatus
from orchestrator.server.command import mask_secrets, sglang_flags
from orchestrator.spec import SweepSpec
from orchestrator.tracking import TrialRecord


def best_record(records: Sequence[TrialRecord]) -> TrialRecord | None:
    ok = [r for r in records if r.result.status is TrialStatus.OK and r.objective is not None]
    return max(ok, key=lambda r: r.objective or 0.0) if ok else None


def sglang_command(record: TrialRecord, spec: SweepSpec) -> list[str]:
    """The real SGLang command for a configuration, whichever backend measured it."""
    version = record.result.server_version or "0.5.17"
    flags = sglang_flags(spec, record.result.config, version=version, port=30000, tp_size=spec.node.gpus)
    return list(
        mask_secrets(["python", "-m", "sglang.launch_server", *flags], tuple(spec.server.secret_flags))
    )


def write_best(
    record: TrialRecord,
    spec: SweepSpec,
    study_dir: Path,
    records: Sequence[TrialRecord] = (),
    confidence: dict[str, Any] | None = None,
) -> list[Path]:
    """best.json and best_command.sh; ``confidence`` (orchestrator.confirm) says how sure the pick is."""
    argv = sglang_command(record, spec)
    r = record.result
    levels = best_by_concurrency(records or [record])
    best = {
        "trial": record.number,
        "config": r.config.as_params(),
        "output_tok_per_s": r.output_tok_per_s,
        "objective": record.objective,
        "accept_length": (r.best_stage.accept_length if r.best_stage else None) or r.server_accept_length,
        "speedup_vs_baseline": record.speedup_vs_baseline,
        "memory": r.memory,
        "resolved_args": r.resolved_args,
        "server_version": r.server_version,
        "command": argv,
        "dataset": r.dataset,
        "best_by_concurrency": levels,
        "runtime_policy": runtime_policy(record, levels),
    }
    if confidence is not None:
        best["confidence"] = confidence
    written = []
    if r.adaptive_config:  # best_command.sh passes it by its file name
        (study_dir / CONFIG_FILE).write_text(r.adaptive_config)
        written.append(study_dir / CONFIG_FILE)
    json_path = study_dir / "best.json"
    json_path.write_text(json.dumps(best, indent=1, default=str))
    sh_path = study_dir / "best_command.sh"
    sh_path.write_text("#!/bin/sh\nexec " + " \\\n  ".join(shlex.quote(a) for a in argv) + "\n")
    sh_path.chmod(0o755)
    return [json_path, sh_path, *written]


def _fmt(value: float | None, spec: str) -> str:
    return format(value, spec) if value is not None else "-"


def render_table(records: Sequence[TrialRecord]) -> str:
    head = (
        f"{'#':>4} {'status':<14} {'tok/s':>9} {'accept':>6} {'ttft99':>8} {'itl99':>7} {'startup':>7} "
        f"{'weights':>7} {'kv_tok':>10}  configuration"
    )
    lines = [head, "-" * len(head)]
    for rec in sorted(records, key=lambda r: r.number):
        r = rec.result
        best = r.best_stage
        accept = (best.accept_length if best else None) or r.server_accept_length
        kv = r.memory.get("kv_cache_tokens")
        lines.append(
            f"{rec.number:>4} {r.status.value:<14} {_fmt(r.output_tok_per_s, '9.1f')} {_fmt(accept, '6.2f')} "
            f"{_fmt(best.ttft_p99_ms if best else None, '8.1f')} "
            f"{_fmt(best.itl_p99_ms if best else None, '7.1f')} "
            f"{_fmt(r.startup_s, '7.1f')} {_fmt(r.memory.get('weights_gb'), '7.2f')} "
            f"{_fmt(kv, '10.0f')}  {r.config.label()}{' (baseline)' if rec.baseline else ''}"
        )
    return "\n".join(lines)


def render_levels(best: dict[str, Any]) -> str:
    """The best speculative setting per concurrency level and the policy to launch with, for the CLI."""
    lines = ["best speculative setting per concurrency level:"]
    for lv in best.get("best_by_concurrency", []):
        lines.append(
            f"  {lv['concurrency']:>5} concurrent: steps {lv['speculative_num_steps']} "
            f"(adaptive {lv['speculative_adaptive']}), {lv['output_tok_per_s']:.1f} tok/s, "
            f"accept {_fmt(lv['accept_length'], '.2f')}  trial {lv['trial']}"
        )
    policy = best.get("runtime_policy", {})
    lines.append(f"runtime policy: speculative_adaptive {policy.get('speculative_adaptive', 'off')}")
    if "suggested_adaptive_config" in policy:
        lines.append(f"  suggested tiers (not measured): {json.dumps(policy['suggested_adaptive_config'])}")
    return "\n".join(lines)
