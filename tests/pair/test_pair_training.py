"""Draft training on a tiny target: the TTT attention, learning, determinism, and the command line."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("safetensors")

from tests.pair.pair_targets import AUX, TINY, cycle_target, greedy_samples  # noqa: E402
from tools.pair.draft_data import draft_vocabulary, split  # noqa: E402
from tools.pair.eagle3_draft import KV, DraftConfig, Eagle3Draft, load_draft  # noqa: E402
from tools.pair.layers import apply_rope, rope_cos_sin  # noqa: E402
from tools.pair.train_draft import TrainOptions, build_draft, main, target_function, train  # noqa: E402
from tools.pair.ttt import chain_accept_length  # noqa: E402

DRAFT_VOCAB = 128
CPU = torch.device("cpu")


def run(folder: Path, seed: int, epochs: int, steps: int = 3) -> tuple[Eagle3Draft, list[dict[str, object]]]:
    target = cycle_target(folder)
    samples = greedy_samples(target, 64)
    train_samples, eval_samples = split(samples, 0.1, seed)
    vocab = draft_vocabulary(train_samples, TINY["vocab_size"], DRAFT_VOCAB)
    draft = build_draft(DraftConfig.for_target(TINY, DRAFT_VOCAB, AUX), vocab, seed, target)
    opts = TrainOptions(seed=seed, epochs=epochs, lr=3e-3, max_tokens=512, ttt_steps=steps, log_every=10)
    history = train(draft, target_function(target, AUX), train_samples, eval_samples, opts, CPU)
    return draft, history


def loop_attention(draft: Eagle3Draft, xs: list[torch.Tensor], positions: torch.Tensor) -> torch.Tensor:
    """The last step's attention written as SpecForge's `LlamaAttention.forward` does with `cache_hidden`:
    scores against step 0's keys under a causal mask, then one score per later step's key at the same
    position, one softmax over all of them."""
    attn = draft.midlayer.self_attn
    cfg = draft.cfg
    keys, values = [], []
    for step, x in enumerate(xs):
        b, t, _ = x.shape
        q = attn.q_proj(x).view(b, t, -1, cfg.head_dim).transpose(1, 2)
        k = attn.k_proj(x).view(b, t, -1, cfg.head_dim).transpose(1, 2)
        v = attn.v_proj(x).view(b, t, -1, cfg.head_dim).transpose(1, 2)
        cos, sin = rope_cos_sin(positions + step, cfg.head_dim, cfg.rope_theta, q.dtype)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        group = cfg.num_attention_heads // cfg.num_key_value_heads
        keys.append(k.repeat_interleave(group, 1))
        values.append(v.repeat_interleave(group, 1))
    scale = 1 / math.sqrt(cfg.head_dim)
    causal = torch.full((t, t), float("-inf")).triu(1)
    scores = [q @ keys[0].transpose(2, 3) * scale + causal]
    scores += [((q * k).sum(-1) * scale)[..., None] for k in keys[1:]]
    weights = torch.softmax(torch.cat(scores, dim=-1), dim=-1)
    out = weights[..., :t] @ values[0]
    for i, v in enumerate(values[1:]):
        out = out + weights[..., t + i, None] * v
    return attn.o_proj(out.transpose(1, 2).reshape(b, t, -1))


def test_ttt_attention_equals_specforges_loop() -> None:
    torch.manual_seed(0)
    draft = Eagle3Draft(DraftConfig.for_target(TINY, DRAFT_VOCAB, AUX))
    positions = torch.arange(7)
    xs = [torch.randn(2, 7, 2 * TINY["hidden_size"]) for _ in range(3)]
    cache: list[KV] = []
    for step, x in enumerate(xs):
        got = draft.midlayer.self_attn(x, positions + step, cache)
    torch.testing.assert_close(got, loop_attention(draft, xs, positions), atol=1e-5, rtol=1e-5)


def test_loss_falls_and_every_step_learns(tmp_path: Path) -> None:
    _, history = run(tmp_path, seed=0, epochs=10)
    first, last = history[0], history[-1]
    assert last["optimizer_steps"] >= 30
    assert last["loss"] < 0.3 * first["loss"]
    chance = 1 / DRAFT_VOCAB
    acc0 = [h["train_step_accuracy"][0] for h in history]
    assert acc0[-1] > acc0[0] + 0.3 and acc0[-1] > 50 * chance
    # the later steps, fed the draft's own hidden states, learn too; held-out text as well
    assert all(a > 0.5 for a in last["train_step_accuracy"])
    assert all(a > 0.5 for a in last["eval_step_accuracy"])
    assert last["eval_chain_accept_length_estimate"] > 1.5


def test_same_seed_same_weights(tmp_path: Path) -> None:
    a, _ = run(tmp_path / "a", seed=3, epochs=2)
    b, _ = run(tmp_path / "b", seed=3, epochs=2)
    c, _ = run(tmp_path / "c", seed=4, epochs=2)
    for name, tensor in a.state_dict().items():
        assert torch.equal(tensor, b.state_dict()[name]), name
    assert not torch.equal(a.fc.weight, c.fc.weight)


def test_chain_accept_length() -> None:
    assert chain_accept_length([1.0, 1.0, 1.0]) == 4.0
    assert chain_accept_length([0.5, 0.5]) == 1.75
    assert chain_accept_length([]) == 1.0


def test_command_line_writes_the_draft_and_a_summary(tmp_path: Path) -> None:
    target = cycle_target(tmp_path / "target")
    data = tmp_path / "train.jsonl"
    lines = [{"input_ids": list(s.input_ids), "prompt_len": 8} for s in greedy_samples(target, 24)]
    lines[0] = {"input_ids": lines[0]["input_ids"], "loss_mask": [0] * 8 + [1] * 24}
    data.write_text("".join(json.dumps(line) + "\n" for line in lines))
    out = tmp_path / "draft"
    summary = main(
        ["--target", str(tmp_path / "target"), "--data", str(data), "--out", str(out), "--seed", "0",
         "--epochs", "2", "--draft-vocab", "64", "--ttt-steps", "3", "--max-tokens", "256", "--lr", "3e-3",
         "--eval-frac", "0.2", "--aux-layers", "0", "1", "3", "--device", "cpu"]
    )  # fmt: skip
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "model.safetensors", "train_summary.json"]
    written = json.loads((out / "train_summary.json").read_text())
    assert written == json.loads(json.dumps(summary))
    assert written["sequences"] == {"train": 19, "eval": 5}
    assert len(written["epochs"]) == 2 and len(written["epochs"][-1]["train_step_accuracy"]) == 3
    assert {"wall_time_s", "parameter_count", "folder_bytes", "draft_vocab_coverage"} <= set(written)
    draft = load_draft(out)
    assert draft.cfg.draft_vocab_size == 64 and list(draft.cfg.aux_layer_ids) == [0, 1, 3]


def test_missing_inputs_are_named_before_any_work(tmp_path: Path) -> None:
    """A target folder without config.json, or a data file that is not there, ends with exit 2 and the
    argument to fix, not a traceback after the target was loaded."""
    import subprocess
    import sys

    data = tmp_path / "train.jsonl"
    data.write_text('{"input_ids": [1, 2, 3], "prompt_len": 1}\n')
    for args, named in (
        (["--target", str(tmp_path / "none"), "--data", str(data)], "--target"),
        (["--target", str(tmp_path), "--data", str(tmp_path / "nodata.jsonl")], "--data"),
    ):
        if named == "--data":
            (tmp_path / "config.json").write_text("{}")
        done = subprocess.run(
            [sys.executable, "-m", "tools.pair.train_draft", *args, "--out", str(tmp_path / "out")],
            capture_output=True, text=True, cwd=Path(__file__).resolve().parents[2],
        )  # fmt: skip
        assert done.returncode == 2, done.stderr
        assert named in done.stderr and "Traceback" not in done.stderr
