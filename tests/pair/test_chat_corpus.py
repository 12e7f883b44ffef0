"""The chat corpus a draft's training prompts come from: clean, disjoint from MT-Bench, mixed by kind."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from tools.pair.chat_corpus import (
    KINDS,
    MAX_PROMPT_CHARS,
    CorpusPrompt,
    chat_mix,
    clean,
    gpteacher,
    gsm8k,
    load_corpus,
    self_instruct,
    write,
)
from tools.pair.prompts import MT_BENCH, load_mt_bench, overlap, template_prompts


def test_the_committed_corpus_holds_every_kind_and_no_held_out_question() -> None:
    corpus = load_corpus()
    kinds = Counter(KINDS[p.source] for p in corpus)
    assert set(kinds) == {"roleplay", "code", "math", "tasks"}
    assert min(kinds.values()) >= 400
    prompts = [p.prompt for p in corpus]
    assert len(prompts) == len(set(prompts))
    assert max(len(p) for p in prompts) <= MAX_PROMPT_CHARS
    assert overlap(prompts, load_mt_bench(MT_BENCH), threshold=0.5) == []


def test_chat_mix_gives_each_kind_its_turn_until_it_runs_out() -> None:
    corpus = [CorpusPrompt("gsm8k-train", f"How many apples does person {i} have?") for i in range(500)]
    corpus += [CorpusPrompt("gpteacher-roleplay", f"You are pirate number {i}. Greet me.") for i in range(30)]
    mix = chat_mix(330, seed=0, corpus=corpus)
    assert len(mix) == len(set(mix)) == 330
    roleplay = sum("pirate" in p for p in mix)
    math = sum("apples" in p for p in mix)
    assert roleplay == 30  # the smallest kind runs out first, then the others share its turns
    assert math == (330 - 30) // 2
    assert chat_mix(330, seed=0, corpus=corpus) == mix
    assert chat_mix(330, seed=1, corpus=corpus) != mix


def test_chat_mix_from_the_committed_corpus_is_balanced_and_deterministic() -> None:
    mix = chat_mix(6000, seed=0)
    kinds = {p.prompt: KINDS[p.source] for p in load_corpus()}
    counts = Counter(kinds.get(p, "templates") for p in mix)
    # five kinds, 1200 a turn-share each; the Self-Instruct tasks (423) run out and the rest share theirs
    assert counts["tasks"] == 423
    share = (6000 - 423) // 4
    assert {counts[k] for k in ("roleplay", "code", "math", "templates")} <= {share, share + 1}
    assert chat_mix(6000, seed=0) == mix


def test_asking_the_mix_for_more_prompts_than_exist_names_the_field() -> None:
    with pytest.raises(ValueError, match="count: at most"):
        chat_mix(len(load_corpus()) + len(template_prompts()) + 1, seed=0)


def test_clean_drops_duplicates_long_prompts_and_near_copies_of_held_out_questions() -> None:
    held = ["Compose an engaging travel blog post about a recent trip to Hawaii."]
    raw = [
        CorpusPrompt("gsm8k-train", "A train leaves at 3 pm. When does it arrive?"),
        CorpusPrompt("gsm8k-train", "A train leaves at 3 pm. When does it arrive?"),
        CorpusPrompt("gpteacher-roleplay", "x" * (MAX_PROMPT_CHARS + 1)),
        CorpusPrompt("self-instruct-seed", "Compose an engaging travel blog post about a trip to Hawaii!"),
        CorpusPrompt("gpteacher-codegen", ""),
    ]
    assert clean(raw, held) == [raw[0]]


def test_sources_are_read_as_their_repositories_lay_them_out(tmp_path: Path) -> None:
    gpt = tmp_path / "gpt"
    (gpt / "Roleplay").mkdir(parents=True)
    (gpt / "Codegen").mkdir()
    item = {"instruction": "Act as a chef.", "input": "Make soup.", "response": "never read"}
    (gpt / "Roleplay" / "roleplay-simple-deduped-roleplay-instruct.json").write_text(json.dumps([item]))
    code = {"instruction": "Reverse a list in Python.", "input": "", "response": "never read"}
    (gpt / "Codegen" / "codegen-instruct.json").write_text(json.dumps([code]))
    math = tmp_path / "train.jsonl"
    math.write_text(json.dumps({"question": " Two plus two? ", "answer": "4"}) + "\n")
    si = tmp_path / "si"
    (si / "data").mkdir(parents=True)
    (si / "human_eval").mkdir()
    instance = {"input": "He go home.", "output": "He goes home."}
    task = {"instruction": "Fix the grammar.", "instances": [instance]}
    (si / "data" / "seed_tasks.jsonl").write_text(json.dumps(task) + "\n")
    (si / "human_eval" / "user_oriented_instructions.jsonl").write_text("")
    prompts = gpteacher(gpt) + gsm8k(math) + self_instruct(si)
    assert prompts == [
        CorpusPrompt("gpteacher-roleplay", "Act as a chef.\n\nMake soup."),
        CorpusPrompt("gpteacher-codegen", "Reverse a list in Python."),
        CorpusPrompt("gsm8k-train", "Two plus two?"),
        CorpusPrompt("self-instruct-seed", "Fix the grammar.\n\nHe go home."),
    ]
    out = tmp_path / "corpus.jsonl.gz"
    write(prompts, out)
    first = out.read_bytes()
    write(prompts, out)
    assert out.read_bytes() == first  # the same prompts, the same bytes: the committed file is stable
    assert load_corpus(out) == prompts
