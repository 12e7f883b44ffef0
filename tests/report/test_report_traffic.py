"""The report's traffic section: the dataset mix, the policy, per-dataset figures and lossy trials."""

from __future__ import annotations

from dataclasses import replace

from orchestrator.driver.console.progress import ProgressPrinter
from orchestrator.records import TrialRecord, TrialResult, TrialStatus
from orchestrator.report.data import RunReadBack
from orchestrator.report.sections import traffic_section
from orchestrator.spec.search import make_config


def test_lossy_trials_are_shown_with_their_first_difference() -> None:
    rows = [
        RunReadBack(
            number=1,
            run_id="a",
            status="ok",
            config="mf0.880 s3k1d4",
            params={"dataset": "generated-chat 0.7, random 0.3", "speculative_adaptive": "tiers"},
            metrics={"accept_length.generated-chat": 3.31, "output_tok_per_s.generated-chat": 700.0},
            lossless="mismatch",
            lossless_detail="prompt 2 (generated-chat, ids [1, 3, ...]): first difference at output "
            "position 7: baseline token 41, speculative token 42",
        ),
        RunReadBack(number=2, run_id="b", status="ok", config="mf0.880 nospec", lossless=""),
        RunReadBack(number=3, run_id="c", status="oom", config="mf0.950 s5k1d6"),
    ]
    html = traffic_section(rows)
    assert "Lossy speculation: 1 trial(s)" in html
    assert "first difference at output position 7: baseline token 41, speculative token 42" in html
    assert "generated-chat 3.31" in html and "generated-chat 700.0" in html and ">tiers<" in html
    assert "mf0.950" not in html  # a trial that did not complete has no traffic figures


def test_a_near_tie_is_shown_as_numerics_not_as_lossy() -> None:
    detail = (
        "prompt 1 (generated-chat, 9 ids ending [..., 4, 5]): first difference at output position 24: "
        "baseline token 260, speculative token 8009 (baseline margin 0.03 nats)"
    )
    row = RunReadBack(number=1, run_id="a", status="ok", config="mf0.880 s3k1d4", lossless="near_tie")
    html = traffic_section([replace(row, lossless_detail=detail)])
    assert "Lossy speculation" not in html and 'class="bad"' not in html
    assert "near tie (numerics, not lossy): " in html and "baseline margin 0.03 nats" in html


def test_the_console_line_says_a_near_tie_is_numerics() -> None:
    lines: list[str] = []
    printer = ProgressPrinter(2, False, lines.append, now=lambda: 0.0)
    config = make_config(0.88, 128, 48, 3, 1, None)
    result = TrialResult(config, TrialStatus.OK, "n", ())
    detail = "prompt 1: first difference at output position 24 (baseline margin 0.03 nats)"
    tags = (("lossless", "near_tie"), ("lossless_detail", detail))
    printer.record(TrialRecord(1, result, 1.0, extra_tags=tags))
    assert "near tie (numerics, not lossy): " + detail in lines[-1] and "LOSSY" not in lines[-1]


def test_one_dataset_figures_are_not_labelled_with_its_name_again() -> None:
    """The real pair's report read `sharegpt-mt_bench_smollm2.sharegpt 1.63` in the accept-length column
    beside the dataset column that names it: with one dataset the figure stands alone."""
    row = RunReadBack(
        number=1,
        run_id="a",
        status="ok",
        config="mf0.950 s4k1d5",
        params={"dataset": "sharegpt: trials/datasets/mt_bench_smollm2.sharegpt.json"},
        metrics={
            "accept_length.sharegpt-mt_bench_smollm2.sharegpt": 1.6258,
            "output_tok_per_s.sharegpt-mt_bench_smollm2.sharegpt": 3621.49,
        },
        lossless="ok",
    )
    html = traffic_section([row])
    assert '<td class="num">1.63</td>' in html and '<td class="num">3621.5</td>' in html, html
    assert "sharegpt-mt_bench_smollm2.sharegpt 1.63" not in html
