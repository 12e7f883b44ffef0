"""A saved draft's accuracy on a chat workload, on the CPU: what SGLang will accept, before a GPU is spent.

    python -m tools.pair.eval_draft TARGET DRAFT WORKLOAD.sharegpt.json [--steps 6] [--out FILE]

The workload is ShareGPT-style (the held-out `mt_bench.sharegpt.json` that `selfdistill` writes: each
question with the target's own answer). Each question goes through the target's chat template, its answer
is appended, and the draft is run as it trains (`ttt.ttt_loss`, teacher-forced on the target's states) over
the answer tokens: the per-step accuracy and the chain estimate it implies (`ttt.chain_accept_length`).
On the real pair this told a narrow training distribution from a serving fault: the draft's step-0
accuracy on MT-Bench's answers (0.345) matched what SGLang accepted, not its 0.56 on held-out training
answers.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Any

import torch

from tools.pair.draft_data import Sample
from tools.pair.eagle3_draft import Eagle3Draft, load_draft
from tools.pair.llama_target import LlamaTarget, load_target
from tools.pair.selfdistill import chat_prompt_ids
from tools.pair.train_draft import TrainOptions, evaluate, target_function
from tools.pair.ttt import chain_accept_length

log = logging.getLogger(__name__)
CPU = torch.device("cpu")


def sharegpt_samples(tokenizer: Any, conversations: list[dict[str, Any]]) -> list[Sample]:
    """Each first human turn through the chat template, then the first answer's ids (the ones scored)."""
    samples = []
    for item in conversations:
        turns = item["conversations"]
        question = next(t["value"] for t in turns if t["from"] == "human")
        answer = next(t["value"] for t in turns if t["from"] == "gpt")
        prompt = chat_prompt_ids(tokenizer, question)
        ids = [int(i) for i in tokenizer(answer, add_special_tokens=False)["input_ids"]]
        if ids:
            samples.append(Sample(tuple(prompt + ids), (0,) * len(prompt) + (1,) * len(ids)))
    return samples


def draft_accuracy(
    target: LlamaTarget, draft: Eagle3Draft, samples: list[Sample], steps: int, max_tokens: int = 4096
) -> dict[str, Any]:
    """Per-step accuracy of ``draft`` over ``samples``' scored tokens, and the chain estimate."""
    opts = TrainOptions(ttt_steps=steps, max_tokens=max_tokens)
    stats = evaluate(draft, target_function(target, list(draft.cfg.aux_layer_ids)), samples, opts, CPU)
    accuracy = stats.accuracy()
    return {
        "sequences": len(samples),
        "scored_tokens": stats.positions[0],
        "step_accuracy": accuracy,
        "chain_accept_length_estimate": chain_accept_length(accuracy),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(prog="python -m tools.pair.eval_draft", description=__doc__.split("\n")[0])
    p.add_argument("target", type=Path, help="the target's model folder (config.json, weights, tokenizer)")
    p.add_argument("draft", type=Path, help="the draft's folder (config.json, model.safetensors)")
    p.add_argument("workload", type=Path, help="ShareGPT-style JSON: questions with the target's answers")
    p.add_argument("--steps", type=int, default=6, help="draft steps scored (default 6)")
    p.add_argument("--out", type=Path, help="also write the figures here (JSON)")
    args = p.parse_args(argv)
    for name in ("target", "draft", "workload"):
        if not getattr(args, name).exists():
            print(f"eval_draft: {name} {getattr(args, name)} does not exist", file=sys.stderr)
            raise SystemExit(2)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    from transformers import AutoTokenizer  # the target's tokenizer and chat template, as SGLang reads them

    target = load_target(args.target, CPU, torch.float32)
    draft = load_draft(args.draft, torch.float32)
    draft.set_embed(target.embed_weight.detach().float().cpu())  # the draft serves with the target's
    samples = sharegpt_samples(
        AutoTokenizer.from_pretrained(args.target), json.loads(args.workload.read_text())
    )
    result = draft_accuracy(target, draft, samples, args.steps)
    if args.out is not None:
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(
        f"{result['sequences']} answers, {result['scored_tokens']} tokens: per-step accuracy "
        f"{[round(a, 3) for a in result['step_accuracy']]}, chain estimate "
        f"{result['chain_accept_length_estimate']:.2f}"
    )
    return result


if __name__ == "__main__":
    main()
