"""Chat prompts written by people and other models, for a draft's training answers.

    python -m tools.pair.chat_corpus --gpteacher DIR --gsm8k TRAIN.jsonl --self-instruct DIR [--out FILE]

Why: a draft trained on the target's answers to `prompts.training_prompts`' templates alone (30 templates
x 150 topics) reached a step-0 accuracy of 0.56 on held-out template answers but 0.345 on MT-Bench's, the
workload it is measured on, and SGLang accepted what the latter predicted (1.3-1.5 tokens a step). The
templates cover explanations, lists and short stories; chat traffic also asks for role play, code with its
input, arithmetic word problems, rewriting and extraction from a given text. This corpus brings those,
from sources whose licences allow it:

- GPTeacher (teknium1/GPTeacher, MIT): its role-play and code-generation instructions, with their inputs;
- GSM8K (openai/grade-school-math, MIT): the training split's questions (never its test split);
- Self-Instruct (yizhongw/self-instruct, Apache-2.0): its 175 seed tasks and 252 user-oriented
  instructions, each with its first instance's input.

Only the prompts are kept (never the sources' answers: the draft learns the target's), deduplicated, cut
to prompts a 8192-token context answers comfortably, and any prompt near one of MT-Bench's held-out
questions is dropped (`prompts.overlap` at 0.5), so the measuring set stays unseen. The result is
committed as `tools/pair/data/chat_prompts.jsonl.gz` (one `{"source", "prompt"}` a line), so the offline
node needs none of the sources.
"""

from __future__ import annotations

import argparse
import gzip
import json
import logging
import random
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

from tools.pair.prompts import MT_BENCH, load_mt_bench, overlap, template_prompts

log = logging.getLogger(__name__)

CORPUS = Path(__file__).resolve().parent / "data" / "chat_prompts.jsonl.gz"
# Prompts longer than this (characters) are dropped: a long input leaves a 135M model little to say and
# the draft learns from answers, not prompts.
MAX_PROMPT_CHARS = 1500
HELD_OUT_OVERLAP = 0.5


@dataclass(frozen=True)
class CorpusPrompt:
    source: str
    prompt: str


def _with_input(instruction: str, given: str) -> str:
    instruction, given = instruction.strip(), given.strip()
    return f"{instruction}\n\n{given}" if given else instruction


def gpteacher(folder: Path) -> list[CorpusPrompt]:
    """Role-play and code-generation instructions (with their inputs) from a GPTeacher checkout."""
    out = []
    for source, name in (
        ("gpteacher-roleplay", "Roleplay/roleplay-simple-deduped-roleplay-instruct.json"),
        ("gpteacher-codegen", "Codegen/codegen-instruct.json"),
    ):
        for item in json.loads((folder / name).read_text()):
            out.append(CorpusPrompt(source, _with_input(item["instruction"], item.get("input", ""))))
    return out


def gsm8k(train_jsonl: Path) -> list[CorpusPrompt]:
    """GSM8K's training questions (its test split is never read)."""
    lines = train_jsonl.read_text().splitlines()
    return [CorpusPrompt("gsm8k-train", json.loads(line)["question"].strip()) for line in lines if line]


def self_instruct(folder: Path) -> list[CorpusPrompt]:
    """Self-Instruct's seed tasks and user-oriented instructions, each with its first instance's input."""
    out = []
    for source, name in (
        ("self-instruct-seed", "data/seed_tasks.jsonl"),
        ("self-instruct-user", "human_eval/user_oriented_instructions.jsonl"),
    ):
        for line in (folder / name).read_text().splitlines():
            if line.strip():
                task = json.loads(line)
                first = (task.get("instances") or [{}])[0]
                out.append(CorpusPrompt(source, _with_input(task["instruction"], first.get("input", ""))))
    return out


def clean(prompts: list[CorpusPrompt], held_out: list[str]) -> list[CorpusPrompt]:
    """Distinct prompts of a sensible length, none near a held-out question, in the sources' order."""
    seen: set[str] = set()
    kept = []
    for p in prompts:
        if p.prompt and len(p.prompt) <= MAX_PROMPT_CHARS and p.prompt not in seen:
            seen.add(p.prompt)
            kept.append(p)
    near = {t for t, _ in overlap([p.prompt for p in kept], held_out, HELD_OUT_OVERLAP)}
    if near:
        log.info("dropped %d prompts near an MT-Bench question", len(near))
    return [p for p in kept if p.prompt not in near]


def write(prompts: list[CorpusPrompt], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    # mtime 0: the same prompts give the same bytes, so the committed file changes only with its content.
    with path.open("wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as f:
        for p in prompts:
            f.write((json.dumps(asdict(p), ensure_ascii=False) + "\n").encode())


def load_corpus(path: Path = CORPUS) -> list[CorpusPrompt]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [CorpusPrompt(**json.loads(line)) for line in f if line.strip()]


# The kind of request each source stands for: the mix draws each kind equally.
KINDS = {
    "gpteacher-roleplay": "roleplay",
    "gpteacher-codegen": "code",
    "gsm8k-train": "math",
    "self-instruct-seed": "tasks",
    "self-instruct-user": "tasks",
}


def chat_mix(count: int, seed: int, corpus: list[CorpusPrompt] | None = None) -> list[str]:
    """``count`` distinct training prompts, the same for the same seed: the templates and each family of
    the corpus drawn in turn (so each kind of request counts equally until one runs out), then shuffled.

    Equal turns rather than the sources' sizes: GSM8K alone holds half the corpus, and a draft trained on
    half arithmetic would learn the target's arithmetic, not its chat.
    """
    families: dict[str, list[str]] = {"templates": template_prompts()}
    for p in corpus if corpus is not None else load_corpus():
        families.setdefault(KINDS[p.source], []).append(p.prompt)
    rng = random.Random(seed)
    queues = []
    for name in sorted(families):
        prompts = list(families[name])
        rng.shuffle(prompts)
        queues.append(prompts)
    chosen: list[str] = []
    seen: set[str] = set()
    turn = 0
    while len(chosen) < count and any(queues):
        queue = queues[turn % len(queues)]
        turn += 1
        if queue:
            prompt = queue.pop()
            if prompt not in seen:
                seen.add(prompt)
                chosen.append(prompt)
    if len(chosen) < count:
        raise ValueError(f"count: at most {len(chosen)} distinct training prompts, asked for {count}")
    rng.shuffle(chosen)
    return chosen


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.pair.chat_corpus", description=__doc__.split("\n")[0])
    p.add_argument("--gpteacher", type=Path, required=True, help="a teknium1/GPTeacher checkout")
    p.add_argument("--gsm8k", type=Path, required=True, help="GSM8K's grade_school_math/data/train.jsonl")
    p.add_argument("--self-instruct", type=Path, required=True, help="a yizhongw/self-instruct checkout")
    p.add_argument("--out", type=Path, default=CORPUS)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    raw = gpteacher(args.gpteacher) + gsm8k(args.gsm8k) + self_instruct(args.self_instruct)
    prompts = clean(raw, load_mt_bench(MT_BENCH))
    write(prompts, args.out)
    counts = Counter(p.source for p in prompts)
    print(f"{len(prompts)} prompts of {len(raw)} -> {args.out}: {dict(sorted(counts.items()))}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
