"""SGLang's own flag rules, as the simulated node applies them before anything loads."""

from __future__ import annotations

import pytest
from simhelp import KIMI, TINY, resolve, spec

from orchestrator.engines.sglang.logparse import LogParser
from orchestrator.sim.args import MRR_RESET_LINE, TOPK1_LINE, ArgsError
from orchestrator.sim.server_args_text import render_server_args, server_args_items


def test_unknown_flag_exits_2_like_argparse(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        resolve(TINY, "--no-such-flag", "1")
    assert exc.value.code == 2
    assert "unrecognized arguments: --no-such-flag" in capsys.readouterr().err


@pytest.mark.parametrize(
    "partial",
    [
        ["--speculative-num-steps", "3"],
        ["--speculative-eagle-topk", "2", "--speculative-num-draft-tokens", "8"],
    ],
)
def test_speculative_values_go_all_together_or_not_at_all(partial: list[str]) -> None:
    with pytest.raises(ArgsError) as exc:
        resolve(TINY, "--speculative-algorithm", "EAGLE3", *partial)
    assert exc.value.traceback.rstrip().endswith("AssertionError")
    assert "Traceback (most recent call last):" in exc.value.traceback


def test_unset_speculative_values_take_sglang_defaults() -> None:
    args, _ = resolve(TINY, "--speculative-algorithm", "EAGLE3")
    speculative = (args.speculative_num_steps, args.speculative_eagle_topk, args.speculative_num_draft_tokens)
    assert speculative == (5, 4, 8)


def test_topk_1_forces_draft_tokens_to_steps_plus_one() -> None:
    args, _ = resolve(TINY, *spec(3, 1, 8))
    assert args.speculative_num_draft_tokens == 4
    assert TOPK1_LINE in args.log_notes


def test_max_running_requests_reset_to_48_only_when_unset() -> None:
    args, _ = resolve(TINY, *spec(3, 1, 4))
    assert args.max_running_requests == 48 and MRR_RESET_LINE in args.log_notes
    args, _ = resolve(TINY, *spec(3, 1, 4), "--max-running-requests", "16")
    assert args.max_running_requests == 16 and MRR_RESET_LINE not in args.log_notes
    args, _ = resolve(TINY)
    assert args.max_running_requests is None  # derived from the KV pool later, as without speculation


def test_auto_choices_by_gpu_size() -> None:
    args, _ = resolve(TINY, *spec(3, 1, 4))
    assert args.mem_fraction_static == 0.892  # one H200, tp 1, EAGLE3 (sglang.md)
    assert args.cuda_graph_max_bs == 256 and args.chunked_prefill_size == 8192
    args, _ = resolve(KIMI, "--tp-size", "8", *spec(3, 1, 4))
    assert args.cuda_graph_max_bs == 512
    args, _ = resolve("tight", *spec(3, 1, 4))
    assert args.cuda_graph_max_bs == 8 and args.chunked_prefill_size == 2048  # under 20 GiB: T4 class


def test_deprecated_graph_flag_warns_like_0_5_17() -> None:
    args, _ = resolve(TINY, "--cuda-graph-max-bs", "16")
    assert args.cuda_graph_max_bs == 16
    assert any("'--cuda-graph-max-bs' is deprecated" in n for n in args.raw_notes)
    args, _ = resolve(TINY, "--cuda-graph-max-bs-decode", "16")
    assert args.cuda_graph_max_bs == 16 and not args.raw_notes


def test_server_args_line_reads_back_through_the_log_parser() -> None:
    args, prof = resolve(KIMI, "--tp-size", "8", *spec(3, 1, 4), "--cuda-graph-max-bs-decode", "128")
    parser = LogParser()
    parser.feed(f"[2026-01-01 00:00:00] server_args={render_server_args(server_args_items(args, prof))}")
    report = parser.report()
    assert report.args is not None
    assert report.args.mem_fraction_static == 0.76
    assert report.args.max_running_requests == 48
    assert report.args.cuda_graph_max_bs == 128
    assert report.args.tp_size == 8
    assert (report.args.speculative_num_steps, report.args.speculative_eagle_topk) == (3, 1)
    assert report.args.speculative_num_draft_tokens == 4
