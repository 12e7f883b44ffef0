"""The report's traffic section: the dataset mix, the policy, per-dataset figures and lossy trials."""

from __future__ import annotations

from orchestrator.report.data import RunReadBack
from orchestrator.report.sections import traffic_section


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
