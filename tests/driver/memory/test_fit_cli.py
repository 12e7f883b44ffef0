"""`python -m orchestrator.driver.memory.fit`: the prior's figures for one configuration, before any GPU.

Nothing is claimed or launched."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.driver.memory.fit import main
from orchestrator.records import fraction_text

ROOT = Path(__file__).resolve().parents[3]
TARGET = str(ROOT / "trials/models/llama3-8b-shape")
DRAFT = str(ROOT / "trials/models/llama3-8b-eagle3-shape")
H200 = ["--gpu-memory-mib", "143771"]
# Public models' config.json (the figures of their published files): tests/fixtures/models/.
MODELS = ROOT / "tests/fixtures/models"
LLAMA_70B, QWEN_7B, DEEPSEEK_V3 = (str(MODELS / n) for n in ("llama3.1-70b", "qwen2.5-7b", "deepseek-v3"))


def test_json_gives_the_figures_and_the_verdict(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main([TARGET, "--draft", DRAFT, *H200, "--fraction", "0.85", "--cuda-graph-max-bs", "64", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["fits"] is True
    for key in ("weights_gb", "draft_weights_gb", "kv_tokens", "kv_gb", "graph_gb", "floor_fraction"):
        assert key in out
    assert out["weights_gb"] == pytest.approx(14.98, rel=0.02)
    assert out["draft_weights_gb"] == pytest.approx(2.14, rel=0.02)
    assert out["floor_fraction"] == pytest.approx(0.1237, abs=0.0005)


def test_a_configuration_that_cannot_fit_says_where(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [TARGET, "--draft", DRAFT, *H200, "--fraction", "0.98", "--cuda-graph-max-bs", "256"]
    rc = main([*argv, "--max-running-requests", "256", "--steps", "4", "--topk", "2", "--draft-tokens", "8"])
    text = capsys.readouterr().out
    assert rc == 1 and "draft_graph_capture" in text and "it fits at --fraction 0.1238-0.9357" in text


@pytest.mark.parametrize(
    ("argv", "names"),
    [
        (["/no/such/model", *H200, "--fraction", "0.8"], "/no/such/model/config.json"),
        ([TARGET, *H200, "--fraction", "1.2"], "--fraction"),
        ([TARGET, *H200, "--fraction", "0.8", "--steps", "3"], "--draft"),
        ([TARGET, "--gpu-memory-mib", "0", "--fraction", "0.8"], "--gpu-memory-mib"),
    ],
)
def test_bad_input_exits_2_naming_the_file_or_flag(
    argv: list[str], names: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    assert names in capsys.readouterr().err


def test_it_runs_as_a_module() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "orchestrator.driver.memory.fit",
            TARGET,
            *H200,
            "--fraction",
            "0.85",
            "--json",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode == 0 and json.loads(done.stdout)["kv_tokens"] > 800_000


@pytest.mark.parametrize(
    ("model", "tp", "heads", "accepted"),
    [
        (TARGET, "3", "32 attention heads", "1, 2, 4, 8, 16, 32"),
        (LLAMA_70B, "3", "64 attention heads", "1, 2, 4, 8, 16, 32, 64"),
        (QWEN_7B, "16", "28 attention heads", "1, 2, 4, 28"),
        (TARGET, "64", "32 attention heads", "1, 2, 4, 8, 16, 32"),
    ],
)
def test_a_tp_that_does_not_divide_the_heads_is_refused(
    model: str, tp: str, heads: str, accepted: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """SGLang asserts num_attention_heads % tp_size == 0 when it builds the model: no fit, exit 2."""
    assert main([model, *H200, "--fraction", "0.85", "--tp", tp]) == 2
    err = capsys.readouterr().err
    assert f"--tp {tp}: {heads}" in err and "num_attention_heads" in err
    assert f"SGLang accepts tp {accepted}" in err


def test_kv_heads_fewer_than_gpus_must_replicate_evenly(capsys: pytest.CaptureFixture[str]) -> None:
    """Qwen2.5-7B at tp 14: 14 divides its 28 heads, but its 4 KV heads cannot be replicated over 14."""
    assert main([QWEN_7B, *H200, "--fraction", "0.85", "--tp", "14"]) == 2
    err = capsys.readouterr().err
    assert "4 KV heads (num_key_value_heads" in err and "cannot be replicated over 14 GPUs" in err
    assert main([QWEN_7B, *H200, "--fraction", "0.85", "--tp", "28"]) == 0  # one KV head per 7 GPUs


def test_more_draft_tokens_than_the_tree_holds_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [TARGET, "--draft", DRAFT, *H200, "--fraction", "0.85"]
    assert main([*argv, "--topk", "2", "--steps", "2", "--draft-tokens", "9"]) == 2
    err = capsys.readouterr().err
    assert "--draft-tokens 9" in err and "top-k 2 x 2 steps, which holds 3..5" in err
    assert main([*argv, "--topk", "2", "--steps", "2", "--draft-tokens", "5"]) == 0


def test_top_k_1_is_sized_as_sglang_runs_it(capsys: pytest.CaptureFixture[str]) -> None:
    """SGLang forces steps + 1 draft tokens under top-k 1: the figures are those of s3k1d4, said so."""
    argv = [TARGET, "--draft", DRAFT, *H200, "--fraction", "0.85", "--json"]
    assert main([*argv, "--topk", "1", "--steps", "3", "--draft-tokens", "9"]) == 0
    forced = json.loads(capsys.readouterr().out)
    assert main([*argv, "--topk", "1", "--steps", "3"]) == 0
    plain = json.loads(capsys.readouterr().out)
    assert "SGLang runs steps + 1 = 4" in forced.pop("note")
    assert forced == plain


@pytest.mark.parametrize(
    ("target", "figures"),
    [
        (LLAMA_70B, ("hidden states 4096 wide", "the target's are 8192")),
        (QWEN_7B, ("the target's are 3584", "vocabulary has 128256 tokens", "the target's 152064")),
    ],
)
def test_a_draft_made_for_another_target_is_refused(
    target: str, figures: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([target, "--draft", DRAFT, *H200, "--fraction", "0.85", "--tp", "4"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --draft: ")
    for figure in figures:
        assert figure in err


def test_weights_bigger_than_a_gpu_say_so_and_which_tp_fits(capsys: pytest.CaptureFixture[str]) -> None:
    """DeepSeek-V3 (FP8, 671B) on one H200: no fraction helps; the answer is a tp that holds it."""
    assert main([DEEPSEEK_V3, *H200, "--fraction", "0.85"]) == 1
    verdict = capsys.readouterr().out.splitlines()[-1]
    assert "the weights alone (626.94 GiB per GPU at tp 1) exceed" in verdict
    assert "139.09 GiB" in verdict and "no fraction fits" in verdict
    assert "tp 8 would fit" in verdict and "--tp 8" in verdict
    assert main([DEEPSEEK_V3, *H200, "--fraction", "0.85", "--tp", "8"]) == 0


def test_figures_are_labelled_gib_and_weights_also_in_gb(capsys: pytest.CaptureFixture[str]) -> None:
    """SGLang's log says "GB" for GiB; the command says GiB, and gives the weights in GB as well (a user
    compares them with parameter counts): 14.97 GiB is 16.08 GB."""
    assert main([TARGET, *H200, "--fraction", "0.85"]) == 0
    out = capsys.readouterr().out
    assert "target weights        14.97 GiB (16.08 GB)" in out
    assert "free before loading   139.09 GiB per GPU" in out
    assert " GB per GPU" not in out and "GB (target + draft)" not in out


# The H200's 8B sweep: concurrency 32, 256-token prompts, graph bs 32, max running 64, prefill graphs off
UNDER_LOAD = [
    *H200,
    "--fraction",
    "0.98",
    "--cuda-graph-max-bs",
    "32",
    "--max-running-requests",
    "64",
    "--no-prefill-graphs",
    "--concurrency",
    "32",
    "--input-len",
    "256",
]
FIRST_LAUNCH = str(ROOT / "tests/fixtures/sglang/0.5.17/llama8b-live/trials/0000/server.log")


@pytest.mark.parametrize(
    ("tree", "rc", "peak", "ceiling"),
    [(("1", "2", "2"), 0, "3.32", "0.983"), (("4", "2", "8"), 1, "3.59", "0.978")],
)
def test_the_serving_peak_and_the_largest_fraction_that_leaves_room_for_it(
    capsys: pytest.CaptureFixture[str], tree: tuple[str, str, str], rc: int, peak: str, ceiling: str
) -> None:
    """With the first launch's log (s3k1d4 at 0.85) the prior's left after start-up is the node's: s1k2d2
    serves at 0.98 (as on the GPU, 3.73 GB free), s4k2d8 does not (it ran out of memory with 3.29)."""
    steps, topk, tokens = tree
    argv = [TARGET, "--draft", DRAFT, *UNDER_LOAD, "--steps", steps, "--topk", topk, "--draft-tokens", tokens]
    assert main([*argv, "--log", FIRST_LAUNCH]) == rc
    out = capsys.readouterr().out
    assert f"serving peak          {peak} GiB at concurrency 32: runtime 1.22 + fragmentation 0.37" in out
    assert f"serving ceiling       {ceiling}" in out
    assert ("serves                yes" in out) is (rc == 0)


def test_without_a_log_the_serving_ceiling_comes_from_the_prior_s_conservative_left(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = [TARGET, "--draft", DRAFT, *UNDER_LOAD, "--steps", "1", "--topk", "2", "--draft-tokens", "2"]
    assert main([*argv, "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    # starts; 2.84 GiB predicted left (3.73 on the GPU: the prior credits the draft's embedding freed
    # before the captures, not the rest the allocator gives back), 3.32 needed
    assert out["fits"] is True and out["serves"] is False
    assert out["left_gb"] == pytest.approx(2.84, abs=0.01) and out["left_gb"] < 3.73
    assert out["serving_peak_gb"] == pytest.approx(3.32, abs=0.01)
    assert out["serving_ceiling_fraction"] == pytest.approx(0.9763, abs=0.001)
    assert out["serving_ceiling_fraction"] < out["ceiling_fraction"]


def test_a_log_that_cannot_say_what_start_up_left_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    argv = [TARGET, "--draft", DRAFT, *UNDER_LOAD]
    assert main([*argv, "--log", str(tmp_path / "missing.log")]) == 2
    assert "--log" in capsys.readouterr().err
    empty = tmp_path / "empty.log"
    empty.write_text("nothing here\n")
    assert main([*argv, "--log", str(empty)]) == 2
    assert "not the log of a server that started" in capsys.readouterr().err


def test_a_fraction_near_one_or_zero_never_prints_as_one_or_zero(capsys: pytest.CaptureFixture[str]) -> None:
    # Seen: --fraction 0.9999 printed `mf1.000` and `0.91 GiB left at fraction 1.000`.
    argv = [TARGET, "--draft", DRAFT, *H200, "--fraction", "0.9999", "--cuda-graph-max-bs", "1024"]
    rc = main([*argv, "--steps", "8", "--topk", "8", "--draft-tokens", "60"])
    text = capsys.readouterr().out
    assert rc == 1
    assert "mf0.9999 " in text and "at fraction 0.9999" in text
    assert "1.000" not in text


def test_without_speculation_the_serving_peak_has_no_verify_term(capsys: pytest.CaptureFixture[str]) -> None:
    # Seen: a configuration with no draft listed `verify of 48 tokens 0.07` in its serving peak.
    assert main([TARGET, *H200, "--fraction", "0.9"]) == 0
    peak = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("serving peak"))
    # It is a plain decode step: one token per running request (48), its logits counted as before.
    assert "verify" not in peak and "decode of 48 tokens 0.07" in peak
    assert main([TARGET, "--draft", DRAFT, *H200, "--fraction", "0.9", "--steps", "3", "--topk", "1"]) == 0
    peak = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("serving peak"))
    assert "verify of" in peak


@pytest.mark.parametrize(
    ("fraction", "text"),
    [(0.88, "0.880"), (0.9999, "0.9999"), (0.99999, "0.99999"), (0.0004, "0.0004"), (0.9994, "0.999")],
)
def test_a_fraction_prints_with_three_decimals_unless_they_would_round_it_to_zero_or_one(
    fraction: float, text: str
) -> None:
    assert fraction_text(fraction) == text
