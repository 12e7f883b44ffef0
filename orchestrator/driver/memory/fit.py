"""``python -m orchestrator.driver.memory.fit MODEL_DIR [--draft DIR] --gpu-memory-mib N --fraction F``:
what a launch configuration needs per GPU, predicted from the models' config.json before any GPU is claimed
(the same code the sweep skips infeasible configurations with: `orchestrator.driver.memory.prior`).

Exit 0 when it fits, 1 when it does not, 2 on bad input (the message names the file, field or flag).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from orchestrator.driver.memory.prior import estimate, facts_from_shapes, without_prefill_graphs
from orchestrator.model_shape import ShapeError, load_shape
from orchestrator.records import ServerConfig


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m orchestrator.driver.memory.fit",
        description="Predict an SGLang launch's memory per GPU from config.json, before any launch.",
    )
    p.add_argument("model_dir", help="the target model's folder (its config.json is read)")
    p.add_argument("--draft", help="the EAGLE-3 draft's folder (its config.json is read)")
    p.add_argument("--gpu-memory-mib", type=float, required=True, help="one GPU's total memory (NVML, MiB)")
    p.add_argument("--tp", type=int, default=1, help="--tp-size (default 1)")
    p.add_argument("--fraction", type=float, required=True, help="--mem-fraction-static")
    p.add_argument("--cuda-graph-max-bs", type=int, default=256, help="default 256")
    p.add_argument("--max-running-requests", type=int, default=48, help="default 48 (SGLang's with EAGLE)")
    p.add_argument("--steps", type=int, help="--speculative-num-steps (with --draft; default 3)")
    p.add_argument("--topk", type=int, help="--speculative-eagle-topk (default 1)")
    p.add_argument("--draft-tokens", type=int, help="--speculative-num-draft-tokens (default steps + 1)")
    p.add_argument("--sglang-version", default="0.5.17", help="its memory accounting (default 0.5.17)")
    p.add_argument("--no-prefill-graphs", action="store_true", help="--cuda-graph-backend-prefill disabled")
    p.add_argument("--json", action="store_true", help="one JSON object instead of the table")
    return p


def _bad(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 2


def _check(args: argparse.Namespace) -> str | None:
    if not 0 < args.fraction < 1:
        return f"--fraction {args.fraction}: give a value between 0 and 1 (exclusive)"
    if args.gpu_memory_mib <= 0:
        return f"--gpu-memory-mib {args.gpu_memory_mib}: give the GPU's total memory in MiB (e.g. 143771)"
    for flag, value in (
        ("--tp", args.tp),
        ("--cuda-graph-max-bs", args.cuda_graph_max_bs),
        ("--max-running-requests", args.max_running_requests),
    ):
        if value < 1:
            return f"{flag} {value}: give a whole number of at least 1"
    tree = (args.steps, args.topk, args.draft_tokens)
    if any(v is not None for v in tree) and not args.draft:
        return "--steps/--topk/--draft-tokens need --draft (the draft model's folder)"
    if any(v is not None and v < 1 for v in tree):
        return "--steps, --topk and --draft-tokens must be at least 1"
    return None


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if problem := _check(args):
        return _bad(problem)
    try:
        target = load_shape(args.model_dir)
        draft = load_shape(args.draft) if args.draft else None
    except ShapeError as err:
        return _bad(str(err))
    steps = args.steps or 3 if draft else None
    config = ServerConfig(
        mem_fraction_static=args.fraction,
        cuda_graph_max_bs=args.cuda_graph_max_bs,
        max_running_requests=args.max_running_requests,
        speculative_num_steps=steps,
        speculative_eagle_topk=(args.topk or 1) if draft else None,
        speculative_num_draft_tokens=(args.draft_tokens or (steps or 0) + 1) if draft else None,
    )
    facts = facts_from_shapes(target, draft, args.gpu_memory_mib, args.tp, args.sglang_version)
    if args.no_prefill_graphs:
        facts = without_prefill_graphs(facts)
    est = estimate(facts, config)
    if args.json:
        out = {**est.as_dict(), "tp": args.tp, "pre_model_load_gb": round(facts.pre_gib, 3)}
        out["kv_bytes_per_token"] = facts.kv_cell_bytes
        out["draft_kv_bytes_per_token"] = facts.draft_kv_cell_bytes
        print(json.dumps(out))
        return 0 if est.fits else 1
    rows = [
        ("configuration", config.label() + f" tp{args.tp}"),
        ("free before loading", f"{facts.pre_gib:.2f} GB per GPU"),
        ("target weights", f"{est.weights_gb:.2f} GB"),
        ("draft weights", f"{est.draft_weights_gb:.2f} GB"),
        ("KV pool", f"{est.kv_tokens:,} tokens, {est.kv_gb:.2f} GB (target + draft)"),
        ("free after the pools", f"{est.room_gb:.2f} GB"),
        (
            "set-up + CUDA graphs",
            f"{est.graph_gb:.2f} GB" + (" (prefill graphs on)" if est.prefill_graphs else ""),
        ),
        ("left", f"{est.left_gb:.2f} GB"),
        ("floor fraction", f"{est.floor_fraction:.4f} (minimum viable: below, no KV pool)"),
        ("ceiling fraction", f"{est.ceiling_fraction:.4f} (above, the CUDA graphs no longer fit)"),
        ("fits", "yes" if est.fits else f"no: {est.stage.value if est.stage else ''}: {est.reason}"),
    ]
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"{key:<{width}}  {value}")
    return 0 if est.fits else 1


if __name__ == "__main__":
    sys.exit(main())
