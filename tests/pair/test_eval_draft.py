"""`tools.pair.eval_draft`: a saved draft's accuracy on a chat workload, on the CPU (tiny shapes)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("safetensors.torch")

from tests.pair.pair_targets import AUX, TINY, cycle_target, greedy_samples  # noqa: E402
from tools.pair.draft_data import draft_vocabulary  # noqa: E402
from tools.pair.eagle3_draft import DraftConfig, load_draft, save_draft  # noqa: E402
from tools.pair.eval_draft import draft_accuracy, sharegpt_samples  # noqa: E402
from tools.pair.train_draft import TrainOptions, build_draft, target_function, train  # noqa: E402

CPU = torch.device("cpu")


def test_a_saved_draft_scores_as_it_trained_and_better_than_untrained(tmp_path: Path) -> None:
    target = cycle_target(tmp_path / "target")
    samples = greedy_samples(target, 48)
    vocab = draft_vocabulary(samples, TINY["vocab_size"], 128)
    cfg = DraftConfig.for_target(TINY, 128, AUX)
    untrained = build_draft(cfg, vocab, 0, target)
    before = draft_accuracy(target, untrained, samples, steps=3, max_tokens=512)
    draft = build_draft(cfg, vocab, 0, target)
    opts = TrainOptions(seed=0, epochs=4, lr=3e-3, max_tokens=512, ttt_steps=3, log_every=10)
    train(draft, target_function(target, AUX), samples, samples[:8], opts, CPU)
    save_draft(tmp_path / "draft", draft)
    loaded = load_draft(tmp_path / "draft")
    loaded.set_embed(target.embed_weight.detach().float().cpu())
    after = draft_accuracy(target, loaded, samples, steps=3, max_tokens=512)
    assert len(after["step_accuracy"]) == 3 and after["scored_tokens"] == 48 * 24
    assert after["step_accuracy"][0] > before["step_accuracy"][0] + 0.2
    assert after["chain_accept_length_estimate"] > before["chain_accept_length_estimate"]


class _Tokenizer:
    """The two calls a Hugging Face tokenizer answers here: a chat template and an encoding (one id a
    character), enough to check which ids are scored."""

    def apply_chat_template(self, messages: list[dict[str, str]], **_: Any) -> str:
        return "<u>" + messages[0]["content"] + "<a>"

    def __call__(self, text: str, add_special_tokens: bool = False) -> dict[str, list[int]]:
        return {"input_ids": [ord(c) for c in text]}


def test_only_the_answer_is_scored_and_an_empty_answer_is_skipped() -> None:
    conversations = [
        {"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "yo!"}]},
        {"conversations": [{"from": "human", "value": "q"}, {"from": "gpt", "value": ""}]},
    ]
    (sample,) = sharegpt_samples(_Tokenizer(), conversations)
    assert sample.input_ids == tuple(ord(c) for c in "<u>hi<a>yo!")
    assert sample.loss_mask == (0,) * len("<u>hi<a>") + (1,) * 3
