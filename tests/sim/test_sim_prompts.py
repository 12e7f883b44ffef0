"""The simulated node reads text from ids: acceptance by prompt kind and a greedy output per prompt."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

from orchestrator.bench.chatgen import generated_chat
from orchestrator.bench.tokenizer import BuiltinTokenizer
from orchestrator.bench.workload import synthetic_requests
from orchestrator.config.draft_tree import DraftTree
from orchestrator.sim.profile import load_profile
from orchestrator.sim.prompts import PromptKind, greedy_stream, probs_by_kind, prompt_kind
from orchestrator.sim.speed import expected_accept_length

REPO = Path(__file__).resolve().parents[2]


def test_random_ids_are_not_text_whatever_the_vocabulary() -> None:
    for vocab, length in ((32000, 128), (32000, 2000), (1000, 300), (50, 100), (32000, 12)):
        requests = synthetic_requests(100, length, 4, vocab, seed=1)
        kinds = {prompt_kind(r.input_ids) for r in requests}
        assert kinds == {PromptKind.RANDOM}, (vocab, length)


def test_chat_prompts_are_text() -> None:
    tok = BuiltinTokenizer(32000)
    ids = [tok.encode_chat(c.messages) for c in generated_chat(50, seed=2)]
    long_enough = [i for i in ids if len(i) >= 40]
    assert len(long_enough) > 25
    assert all(prompt_kind(i) is PromptKind.TEXT for i in long_enough)


def test_profile_accepts_text_better_than_random_ids() -> None:
    profile = load_profile("kimi-k25-rtxpro6000")
    tree = DraftTree(3, 1, 4)
    probs = probs_by_kind(profile, tree, broken=False)
    assert (
        expected_accept_length(probs[PromptKind.TEXT])
        > expected_accept_length(probs[PromptKind.RANDOM]) + 0.5
    )
    broken = probs_by_kind(profile, tree, broken=True)
    assert all(p == 0.0 for kind in PromptKind for p in broken[kind])
    tiny = load_profile("h200-tiny")  # no text figures: text behaves as random ids
    tiny_probs = probs_by_kind(tiny, tree, broken=False)
    assert tiny_probs[PromptKind.TEXT] == tiny_probs[PromptKind.RANDOM]


def test_greedy_output_depends_on_the_prompt_only() -> None:
    a = [greedy_stream([5, 6, 7]).randrange(32000) for _ in range(3)]
    assert a == [greedy_stream([5, 6, 7]).randrange(32000) for _ in range(3)]
    other = greedy_stream([5, 6, 8])
    assert [other.randrange(32000) for _ in range(3)] != a
    random.seed(0)  # the global generator plays no part
    assert [greedy_stream([5, 6, 7]).randrange(32000) for _ in range(3)] == a


def test_simulated_text_workload_needs_no_transformers() -> None:
    code = (
        "import sys\n"
        "from orchestrator.spec.sweep_spec import load_spec\n"
        "from orchestrator.bench.traffic import check_workload\n"
        "assert len(check_workload(load_spec('trials/demo-chat.yaml'))) == 16\n"
        "assert 'transformers' not in sys.modules and 'tokenizers' not in sys.modules\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
