"""``python -m orchestrator.driver.memory.fit MODEL_DIR [--draft DIR] --gpu-memory-mib N --fraction F``:
what a launch configuration needs per GPU, predicted from the models' config.json before any GPU is claimed
(the same code the sweep skips infeasible configurations with: `orchestrator.driver.memory.prior`).

Exit 0 when it fits, 1 when it does not, 2 on bad input or a launch SGLang would refuse (a tp that does
not divide the heads, a draft tree that cannot hold the draft tokens, a draft made for another target:
the message names the flag, both figures and what would be accepted). Also ``specsweep fit``.

Memory is in GiB (2^30 bytes), which SGLang's log prints as "GB"; the weights are also given in GB (10^9
bytes), the unit of parameter counts.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace

from orchestrator.config.draft_tree import draft_tokens_problem
from orchestrator.driver.memory.facts import MemoryFacts
from orchestrator.driver.memory.fit_serving import log_shift, serving_check
from orchestrator.driver.memory.fractions import FractionRange, describe, fitting_ranges, smallest_gpu_mib
from orchestrator.driver.memory.prior import Estimate, estimate
from orchestrator.driver.memory.tp_fit import NodeShape, smallest_tp, weights_exceed
from orchestrator.footprint.shape import GIB, ModelShape, ShapeError, load_shape
from orchestrator.records import FailureStage, ServerConfig, fraction_text
from orchestrator.spec.launch_rules import draft_mismatch, tp_refusal

PROG = "python -m orchestrator.driver.memory.fit"
DEFAULT_VERSION = "0.5.17"
# The releases whose logs the parser reads and whose memory accounting the prior follows.
OLDEST_VERSION, NEWEST_VERSION = (0, 5, 5), (0, 5, 23)


def _parser(prog: str = PROG) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog,
        description="Predict an SGLang launch's memory per GPU (GiB, SGLang's \"GB\") from config.json, "
        "before any launch.",
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
    p.add_argument(
        "--sglang-version",
        default=DEFAULT_VERSION,
        help=f"its memory accounting, 0.5.5 to 0.5.23 (default {DEFAULT_VERSION})",
    )
    p.add_argument("--no-prefill-graphs", action="store_true", help="--cuda-graph-backend-prefill disabled")
    p.add_argument(
        "--concurrency", type=int, help="requests in flight under load (default: --max-running-requests)"
    )
    p.add_argument("--input-len", type=int, help="prompt tokens a request (default: a full prefill chunk)")
    p.add_argument(
        "--chunked-prefill-size", type=int, help="SGLang's --chunked-prefill-size (default: its own by GPU)"
    )
    p.add_argument(
        "--log",
        help="a ready server's log of these models on this GPU: what it had left after start-up corrects "
        "the prior's figure, as a sweep's first launch does",
    )
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
        ("--concurrency", args.concurrency),
        ("--input-len", args.input_len),
        ("--chunked-prefill-size", args.chunked_prefill_size),
    ):
        if value is not None and value < 1:  # 0 is given, not left out: it is refused, not defaulted
            return f"{flag} {value}: give a whole number of at least 1"
    if version_problem := _version_problem(args.sglang_version):
        return f"--sglang-version {args.sglang_version}: {version_problem}"
    tree = (args.steps, args.topk, args.draft_tokens)
    if any(v is not None for v in tree) and not args.draft:
        return "--steps/--topk/--draft-tokens need --draft (the draft model's folder)"
    if any(v is not None and v < 1 for v in tree):
        return "--steps, --topk and --draft-tokens must be at least 1"
    return None


def _version_problem(text: str) -> str | None:
    """Why the memory accounting of this SGLang version cannot be given (None: it can): not a version,
    or one outside the releases the figures are checked against."""
    if not re.fullmatch(r"\d+\.\d+\.\d+(\.?(post|rc|dev)\d*)?", text):
        return f"not an SGLang version; give one such as {DEFAULT_VERSION}"
    parts = tuple(int(p) for p in text.split(".")[:3] if p.isdigit())
    if not OLDEST_VERSION <= parts <= NEWEST_VERSION:
        low, high = (".".join(map(str, v)) for v in (OLDEST_VERSION, NEWEST_VERSION))
        return f"outside the releases whose memory accounting this knows ({low} to {high})"
    return None


def _refusal(args: argparse.Namespace, target: ModelShape, draft: ModelShape | None) -> str | None:
    """What SGLang would refuse of this launch, naming the flag (None: it would build it)."""
    if target.eagle3:
        return (
            f"MODEL_DIR {args.model_dir}: an EAGLE-3 draft ({target.architecture}), not a target model; give "
            "the target model's folder, and the draft's with --draft"
        )
    why = tp_refusal([target, *([draft] if draft else [])], args.tp)
    if why:
        return f"--tp {args.tp}: {why}"
    mismatch = draft_mismatch(target, draft) if draft else None
    if mismatch:
        return f"--draft: {mismatch}"
    if draft and args.draft_tokens is not None:
        steps, topk = args.steps or 3, args.topk or 1
        outside = draft_tokens_problem(steps, topk, args.draft_tokens)
        if outside:
            return f"--draft-tokens {args.draft_tokens}: {outside} (--topk {topk}, --steps {steps})"
    return None


def _config(args: argparse.Namespace, speculative: bool) -> tuple[ServerConfig, str]:
    """The launch as SGLang would run it, and a note where it changes what was asked."""
    note = ""
    steps = (args.steps or 3) if speculative else None
    topk = (args.topk or 1) if speculative else None
    draft_tokens = None
    if steps is not None:
        draft_tokens = args.draft_tokens or steps + 1
        if topk == 1 and draft_tokens != steps + 1:
            # SGLang forces steps + 1 under top-k 1 (with a warning): size what it will run.
            note = f"--draft-tokens {draft_tokens} with --topk 1: SGLang runs steps + 1 = {steps + 1}"
            draft_tokens = steps + 1
    config = ServerConfig(
        mem_fraction_static=args.fraction,
        cuda_graph_max_bs=args.cuda_graph_max_bs,
        max_running_requests=args.max_running_requests,
        speculative_num_steps=steps,
        speculative_eagle_topk=topk,
        speculative_num_draft_tokens=draft_tokens,
    )
    return config, note


def _gib_gb(gib: float) -> str:
    return f"{gib:.2f} GiB ({gib * GIB / 1e9:.2f} GB)"


def _size(gib: float) -> str:
    """A size that may come out below zero, as a user can read it: what is missing, not a negative size."""
    return f"{gib:.2f} GiB" if gib >= 0 else f"none: short by {-gib:.2f} GiB"


def _fraction(value: float, none: str) -> str:
    """A fraction inside (0, 1), else what it means (``none``): SGLang takes no other."""
    return f"{value:.4f}" if 0 < value < 1 else none


def _short_gib(est: Estimate, facts: MemoryFacts, fraction: float) -> float:
    """What the launch lacks at its fraction: for the KV pool (the weights past the fraction's share),
    else for the CUDA graphs."""
    if est.stage is FailureStage.KV_ALLOCATION:
        return max((est.floor_fraction - fraction) * facts.pre_gib, 0.0)
    return max(-est.left_gb, 0.0)


@dataclass(frozen=True)
class _Verdict:
    """Whether the launch starts, and when it does not, why and what would."""

    fits: bool
    text: str


def _verdict(
    est: Estimate,
    facts: MemoryFacts,
    node: NodeShape,
    config: ServerConfig,
    tp: int,
    ranges: tuple[FractionRange, ...],
) -> _Verdict:
    if est.fits:
        return _Verdict(True, "yes")
    elsewhere: list[str] = []
    if ranges:  # another fraction starts it on this GPU: that is the answer
        elsewhere.append(f"it fits at --fraction {' or '.join(r.text() for r in ranges)}")
    else:
        advice = smallest_tp(node, config, above=tp)
        if advice is not None:
            elsewhere.append(advice.line())
        gpu = smallest_gpu_mib(
            lambda mib: replace(node, gpu_total_mib=mib).facts(tp), config, node.gpu_total_mib
        )
        if gpu is not None:
            elsewhere.append(
                f"or a GPU of at least {gpu:,.0f} MiB at tp {tp} and --fraction {config.mem_fraction_static}"
            )
        if not elsewhere:
            elsewhere.append(
                "no tp up to 64 that SGLang accepts and no GPU up to 32 times this one starts it"
            )
    if weights_exceed(facts, config):
        weights = est.weights_gb + est.draft_weights_gb
        why = (
            f"the weights alone ({weights:.2f} GiB per GPU at tp {facts.tp}) exceed what one GPU has free "
            f"before loading ({facts.pre_gib:.2f} GiB): no fraction fits"
        )
    else:
        stage = est.stage.value if est.stage else ""
        why = f"{stage}: {est.reason}"
    return _Verdict(False, f"does not fit: {why}; {'; '.join(elsewhere)}")


def main(argv: Sequence[str] | None = None, prog: str = PROG) -> int:
    args = _parser(prog).parse_args(argv)
    if problem := _check(args):
        return _bad(problem)
    try:
        target = load_shape(args.model_dir)
        draft = load_shape(args.draft) if args.draft else None
    except ShapeError as err:
        return _bad(str(err))
    if refused := _refusal(args, target, draft):
        return _bad(refused)
    config, note = _config(args, draft is not None)
    node = NodeShape(target, draft, args.gpu_memory_mib, args.sglang_version, not args.no_prefill_graphs)
    facts = node.facts(args.tp)
    if facts.pre_gib <= 0:
        return _bad(
            f"--gpu-memory-mib {args.gpu_memory_mib:g}: less than the driver and CUDA take before any model "
            "loads; give the GPU's total memory in MiB (e.g. 143771)"
        )
    est = estimate(facts, config)
    shift = log_shift(args.log, facts) if args.log else 0.0
    if isinstance(shift, str):
        return _bad(shift)
    serving = serving_check(args, facts, config, shift)
    ranges = fitting_ranges(facts, config)
    verdict = _verdict(est, facts, node, config, args.tp, ranges)
    speculative = draft is not None
    if args.json:
        out = {**est.as_dict(), "tp": args.tp, "pre_model_load_gb": round(facts.pre_gib, 3), "unit": "GiB"}
        # Nothing impossible: a fraction only inside (0, 1), a size only from 0; what is missing is short_gb.
        out["floor_fraction"] = out["floor_fraction"] if est.floor_fraction < 1 else None
        out["ceiling_fraction"] = out["ceiling_fraction"] if est.ceiling_fraction > 0 else None
        out["room_gb"] = round(max(est.room_gb, 0.0), 3)
        out["left_gb"] = round(max(est.left_gb, 0.0), 3)
        out["short_gb"] = round(_short_gib(est, facts, config.mem_fraction_static), 3)
        out["fitting_fractions"] = [[round(r.low, 4), round(r.high, 4)] for r in ranges]
        out["kv_bytes_per_token"] = facts.kv_cell_bytes
        out["draft_kv_bytes_per_token"] = facts.draft_kv_cell_bytes
        if weights_exceed(facts, config):
            advice = smallest_tp(node, config, above=args.tp)
            out["weights_exceed_gpu"] = True
            out["smallest_tp"] = advice.tp if advice else None
        if not verdict.fits:
            out["reason"] = verdict.text.removeprefix("does not fit: ")
        if note:
            out["note"] = note
        out["serving_peak_gb"] = round(serving.peak.total_gib, 3)
        out["serving_ceiling_fraction"] = round(serving.ceiling, 4) if serving.ceiling > 0 else None
        out["serves"] = serving.serves
        print(json.dumps(out))
        return 0 if est.fits and serving.serves else 1
    pool = est.kv_tokens > 0
    rows = [
        ("configuration", config.label() + f" tp{args.tp}"),
        *([("note", note)] if note else []),
        ("units", 'GiB (2^30 bytes; SGLang\'s log prints these figures as "GB"), weights also in GB (10^9)'),
        ("free before loading", f"{facts.pre_gib:.2f} GiB per GPU"),
        ("target weights", _gib_gb(est.weights_gb)),
        *([("draft weights", _gib_gb(est.draft_weights_gb))] if speculative else []),
        (
            "KV pool",
            f"{est.kv_tokens:,} tokens, {est.kv_gb:.2f} GiB" + (" (target + draft)" if speculative else "")
            if pool
            else "none: the weights leave no room for it at fraction "
            + fraction_text(config.mem_fraction_static),
        ),
        # Past an empty pool SGLang stops: no room, graphs or figure left to give.
        *(
            [
                ("free after the pools", _size(est.room_gb)),
                (
                    "set-up + CUDA graphs",
                    f"{est.graph_gb:.2f} GiB" + (" (prefill graphs on)" if est.prefill_graphs else ""),
                ),
                ("left", _size(est.left_gb)),
            ]
            if pool
            else []
        ),
        (
            "floor fraction",
            _fraction(est.floor_fraction, "none below 1: the weights alone exceed what a GPU has free")
            + (" (minimum viable: below, no KV pool)" if est.floor_fraction < 1 else ""),
        ),
        (
            "fractions that fit",
            describe(facts, config, ranges) if ranges else f"none at tp {args.tp} on this GPU",
        ),
        ("fits", verdict.text),
        *serving.rows(est),
    ]
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"{key:<{width}}  {value}")
    return 0 if est.fits and serving.serves else 1


if __name__ == "__main__":
    sys.exit(main())
