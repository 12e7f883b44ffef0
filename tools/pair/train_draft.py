"""Train an EAGLE-3 draft for a Llama target by self-distillation, and save it as SGLang serves it.

    python -m tools.pair.train_draft --target TARGET_DIR --data train.jsonl --out DRAFT_DIR \\
        --seed 0 --epochs 3 --draft-vocab 8192 --ttt-steps 5

TARGET_DIR is an HF-format Llama folder; train.jsonl holds the target's own generations (format in
`tools.pair.draft_data`). DRAFT_DIR receives config.json and model.safetensors, the folder to pass as
`--speculative-draft-model-path` with `--speculative-algorithm EAGLE3`, and train_summary.json: per epoch the
loss and, per TTT step, the accuracy on the training data and on a held-out part, which are what set SGLang's
accept length (a chain of k draft steps is right as far as each step is).

The target runs alongside the draft on every batch (no cached features): for a 135M target that costs less
than storing 3 x hidden floats and a draft-vocabulary distribution per token. The same seed, data and machine
give the same draft: the seed fixes the initialisation and the batch order; on CUDA, deterministic kernels
are requested (some attention backward kernels are only nearly so).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any

import torch

from tools.pair.draft_data import Sample, batches, coverage, draft_vocabulary, read_jsonl, split
from tools.pair.eagle3_draft import DraftConfig, Eagle3Draft, folder_bytes, param_count, save_draft
from tools.pair.llama_target import LlamaTarget, load_target, read_config
from tools.pair.ttt import StepStats, TargetFn, chain_accept_length, ttt_loss

log = logging.getLogger("tools.pair.train_draft")


@dataclass(frozen=True)
class TrainOptions:
    seed: int = 0
    epochs: int = 3
    lr: float = 3e-4
    weight_decay: float = 0.0
    warmup_ratio: float = 0.03
    min_lr_ratio: float = 0.05
    max_tokens: int = 16384  # padded tokens per batch
    ttt_steps: int = 5  # SGLang's --speculative-num-steps draft tokens per chain; the sweeps try 1..5
    step_decay: float = 0.8
    hard_labels: bool = False
    grad_clip: float = 0.5
    log_every: int = 20
    max_steps: int | None = None  # stop early (tests, smoke runs)


def build_draft(
    cfg: DraftConfig, vocab_ids: torch.Tensor, seed: int, target: LlamaTarget, init_head: bool = True
) -> Eagle3Draft:
    """A fresh draft, its initialisation fixed by `seed`, with the target's embedding (frozen, never saved).

    With `init_head`, the head starts as the target's output rows of the draft tokens and the final norm as
    the target's: step 0 then begins near the target's own reading of a hidden state, not from noise.
    """
    torch.manual_seed(seed)
    draft = Eagle3Draft(cfg)
    draft.set_vocab(vocab_ids)
    draft.set_embed(target.embed_weight.detach().float().cpu())
    if init_head:
        with torch.no_grad():
            draft.lm_head.weight.copy_(target.lm_head.weight.detach().float().cpu()[vocab_ids])
            draft.norm.weight.copy_(target.model.norm.weight.detach().float().cpu())
    return draft


def lr_factor(step: int, total: int, warmup: int, floor: float) -> float:
    """Linear warm-up, then cosine down to `floor` of the peak."""
    if step < warmup:
        return (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))


def _autocast(device: torch.device) -> Any:
    # bf16 matmuls on CUDA, the fp32 master weights staying in AdamW; plain fp32 elsewhere
    return torch.autocast("cuda", dtype=torch.bfloat16, enabled=device.type == "cuda")


def evaluate(
    draft: Eagle3Draft, target_fn: TargetFn, samples: list[Sample], opts: TrainOptions, device: torch.device
) -> StepStats:
    total = StepStats(opts.ttt_steps)
    draft.eval()
    with torch.no_grad():
        for batch in batches(samples, opts.max_tokens, opts.seed, 0, shuffle=False):
            batch = batch.to(device)
            logits, aux = target_fn(batch.input_ids)
            with _autocast(device):
                _, stats = ttt_loss(
                    draft, batch.input_ids, batch.loss_mask, logits, aux, opts.ttt_steps, opts.step_decay,
                    opts.hard_labels,
                )  # fmt: skip
            total.add(stats)
    draft.train()
    return total


def train(
    draft: Eagle3Draft,
    target_fn: TargetFn,
    train_samples: list[Sample],
    eval_samples: list[Sample],
    opts: TrainOptions,
    device: torch.device,
) -> list[dict[str, Any]]:
    """Train `draft` in place; one record per epoch (loss, per-step accuracy on train and held-out data)."""
    draft.to(device).train()
    params = [p for p in draft.parameters() if p.requires_grad]
    optim = torch.optim.AdamW(params, lr=opts.lr, betas=(0.9, 0.95), weight_decay=opts.weight_decay)
    per_epoch = len(batches(train_samples, opts.max_tokens, opts.seed, 0))
    total_steps = per_epoch * opts.epochs
    if opts.max_steps is not None:
        total_steps = min(total_steps, opts.max_steps)
    warmup = max(1, int(opts.warmup_ratio * total_steps))
    log.info("%d batches an epoch, %d optimizer steps, %d warm-up", per_epoch, total_steps, warmup)
    history: list[dict[str, Any]] = []
    step = 0
    for epoch in range(opts.epochs):
        epoch_stats, window = StepStats(opts.ttt_steps), StepStats(opts.ttt_steps)
        loss_sum, n_batches, tokens = 0.0, 0, 0
        for batch in batches(train_samples, opts.max_tokens, opts.seed, epoch):
            if step >= total_steps:
                break
            batch = batch.to(device)
            logits, aux = target_fn(batch.input_ids)
            for group in optim.param_groups:
                group["lr"] = opts.lr * lr_factor(step, total_steps, warmup, opts.min_lr_ratio)
            with _autocast(device):
                loss, stats = ttt_loss(
                    draft, batch.input_ids, batch.loss_mask, logits, aux, opts.ttt_steps, opts.step_decay,
                    opts.hard_labels,
                )  # fmt: skip
            optim.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, opts.grad_clip)
            optim.step()
            step += 1
            loss_sum += float(loss.detach())
            n_batches += 1
            tokens += int(batch.lengths.sum())
            epoch_stats.add(stats)
            window.add(stats)
            if step % opts.log_every == 0 or step == total_steps:
                log.info(
                    "epoch %d step %d/%d lr %.2e loss %.4f acc/step %s",
                    epoch, step, total_steps, optim.param_groups[0]["lr"], loss_sum / n_batches,
                    " ".join(f"{a:.3f}" for a in window.accuracy()),
                )  # fmt: skip
                window = StepStats(opts.ttt_steps)
        record: dict[str, Any] = {
            "epoch": epoch,
            "optimizer_steps": step,
            "tokens": tokens,
            "loss": loss_sum / max(n_batches, 1),
            "step_loss": epoch_stats.mean_loss(),
            "train_step_accuracy": epoch_stats.accuracy(),
        }
        if eval_samples:
            held = evaluate(draft, target_fn, eval_samples, opts, device)
            record["eval_step_accuracy"] = held.accuracy()
            record["eval_chain_accept_length_estimate"] = chain_accept_length(held.accuracy())
        log.info("epoch %d: %s", epoch, json.dumps(record))
        history.append(record)
        if step >= total_steps:
            break
    return history


def target_function(target: LlamaTarget, aux_layer_ids: list[int]) -> TargetFn:
    def run(input_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        with torch.no_grad():
            return target(input_ids, aux_layer_ids)

    return run


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    d = TrainOptions()
    p.add_argument("--target", required=True, help="HF-format Llama folder (config.json, *.safetensors)")
    p.add_argument("--data", required=True, help="JSONL of {input_ids, loss_mask | prompt_len}")
    p.add_argument("--out", required=True, help="folder for the draft and train_summary.json")
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--epochs", type=int, default=d.epochs)
    p.add_argument("--draft-vocab", type=int, default=8192)
    p.add_argument("--ttt-steps", type=int, default=d.ttt_steps)
    p.add_argument("--lr", type=float, default=d.lr)
    p.add_argument("--weight-decay", type=float, default=d.weight_decay)
    p.add_argument("--warmup-ratio", type=float, default=d.warmup_ratio)
    p.add_argument("--max-tokens", type=int, default=d.max_tokens, help="padded tokens per batch")
    p.add_argument("--max-len", type=int, default=2048, help="sequences are cut to this many tokens")
    p.add_argument("--eval-frac", type=float, default=0.05, help="share of sequences held out")
    p.add_argument("--step-decay", type=float, default=d.step_decay)
    p.add_argument("--hard-labels", action="store_true", help="the target's greedy token as label")
    p.add_argument("--grad-clip", type=float, default=d.grad_clip)
    p.add_argument("--aux-layers", type=int, nargs=3, default=None, help="target layer outputs (0-based)")
    p.add_argument("--no-init-from-target", action="store_true", help="random head instead of the target's")
    p.add_argument("--max-steps", type=int, default=None)
    p.add_argument("--log-every", type=int, default=d.log_every)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    return p.parse_args(argv)


def check_inputs(args: argparse.Namespace) -> str:
    """What is missing among the arguments' files, naming the argument ('' when nothing is)."""
    from pathlib import Path

    if not (Path(args.target) / "config.json").is_file():
        return f"--target {args.target}: no config.json there (a converted target's folder holds one)"
    if not Path(args.data).is_file():
        return f"--data {args.data}: no such file (tools.pair.selfdistill writes train.jsonl)"
    return ""


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    problem = check_inputs(args)
    if problem:
        print(f"train_draft: {problem}", file=sys.stderr)
        raise SystemExit(2)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    started = time.monotonic()
    device = torch.device(args.device)
    if device.type == "cuda":
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        # The cuDNN and flash attention backward passes are not deterministic (the first H200 run warned
        # so); the math kernel is, and a 576-wide draft's attention is cheap either way. The same draft on
        # every run is what lets a grid measured over several sessions hold one draft.
        torch.backends.cuda.enable_cudnn_sdp(False)
        torch.backends.cuda.enable_flash_sdp(False)
        torch.backends.cuda.enable_mem_efficient_sdp(False)
    torch.use_deterministic_algorithms(True, warn_only=True)
    opts = TrainOptions(
        seed=args.seed, epochs=args.epochs, lr=args.lr, weight_decay=args.weight_decay,
        warmup_ratio=args.warmup_ratio, max_tokens=args.max_tokens, ttt_steps=args.ttt_steps,
        step_decay=args.step_decay, hard_labels=args.hard_labels, grad_clip=args.grad_clip,
        log_every=args.log_every, max_steps=args.max_steps,
    )  # fmt: skip

    target_raw = read_config(args.target)
    target = load_target(args.target, device, torch.bfloat16 if device.type == "cuda" else torch.float32)
    samples = read_jsonl(args.data, args.max_len)
    if any(max(s.input_ids) >= target.cfg.vocab_size for s in samples):
        raise ValueError("a token id in the data is outside the target's vocabulary")
    train_samples, eval_samples = split(samples, args.eval_frac, args.seed)
    vocab_ids = draft_vocabulary(train_samples, target.cfg.vocab_size, args.draft_vocab)
    cfg = DraftConfig.for_target(target_raw, args.draft_vocab, args.aux_layers)
    draft = build_draft(cfg, vocab_ids, args.seed, target, init_head=not args.no_init_from_target)
    log.info("draft: %d parameters, aux layers %s", param_count(draft), list(cfg.aux_layer_ids))

    history = train(
        draft, target_function(target, list(cfg.aux_layer_ids)), train_samples, eval_samples, opts, device
    )
    out = save_draft(args.out, draft)
    summary: dict[str, Any] = {
        "target": str(args.target),
        "data": str(args.data),
        "sequences": {"train": len(train_samples), "eval": len(eval_samples)},
        "options": asdict(opts),
        "draft_vocab_size": args.draft_vocab,
        "aux_layer_ids": list(cfg.aux_layer_ids),
        "draft_vocab_coverage": {
            "train": coverage(train_samples, vocab_ids),
            "eval": coverage(eval_samples, vocab_ids),
        },
        "parameter_count": param_count(draft),
        "epochs": history,
        "device": str(device),
        "wall_time_s": round(time.monotonic() - started, 2),
    }
    summary["folder_bytes"] = folder_bytes(out)  # the draft files alone, before the summary joins them
    (out / "train_summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    last = history[-1] if history else {}
    mb, n = summary["folder_bytes"] / 1e6, summary["parameter_count"]
    print(
        f"draft saved to {out} ({mb:.1f} MB, {n} parameters, {summary['wall_time_s']} s); per-step accuracy "
        f"train {[round(a, 3) for a in last.get('train_step_accuracy', [])]} "
        f"eval {[round(a, 3) for a in last.get('eval_step_accuracy', [])]}"
    )
    return summary


if __name__ == "__main__":
    main()
