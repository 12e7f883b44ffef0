"""A chat sweep on a real H200 (SGLang 0.5.17, the tiny models, adaptive speculation searched).

The logs are the servers' own, of trials 5 (s3k1d4, adaptive off), 2 (adaptive with SGLang's default
tiers), 3 (adaptive with the tiers the sweep proposed from 3 steps) and 6 (a KV start-up OOM).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from orchestrator.config.adaptive import AdaptiveMode, candidate_steps, config_for, launch_steps
from orchestrator.engines.sglang.logparse import parse_log

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "sglang" / "0.5.17" / "chat-h200"


def _log(name: str) -> str:
    return (FIXTURES / name).read_text()


@pytest.mark.parametrize(
    ("name", "mode", "searched_steps"),
    [("ok-adaptive-default.log", AdaptiveMode.DEFAULT, 3), ("ok-adaptive-tiers.log", AdaptiveMode.TIERS, 3)],
)
def test_every_extra_tier_the_model_counts_was_built_by_the_real_server(
    name: str, mode: AdaptiveMode, searched_steps: int
) -> None:
    text = _log(name)
    launched = launch_steps(mode, searched_steps)
    assert f"--speculative-num-steps {launched} " in text.splitlines()[0]
    tiers = config_for(mode, searched_steps)
    assert tiers is not None
    expected = set(candidate_steps(tiers)) - {launched}  # the launch's own graphs are the usual ones
    report = parse_log(text)
    built = {int(g.name.split("=")[1]) for g in report.graphs if g.name.startswith("adaptive steps=")}
    assert built == expected
    assert all((g.usage_gb or 0) > 0 for g in report.graphs if g.name.startswith("adaptive"))


def test_switches_between_tiers_are_counted() -> None:
    assert parse_log(_log("ok-fixed.log")).adaptive_switches == ()
    switches = parse_log(_log("ok-adaptive-default.log")).adaptive_switches
    # At concurrency 8 the running batch hovers at bucket "8": SGLang's default tiers flip between 7
    # (bucket "1") and 3 steps (bucket "8") about 140 times each way in one 8-second stage.
    assert len(switches) == len(re.findall(r"Switch adaptive runtime state", _log("ok-adaptive-default.log")))
    assert switches.count((7, 3)) == 140 and switches.count((3, 7)) == 140


def test_the_fixed_tree_accepts_its_whole_draft_on_the_tiny_models() -> None:
    # The tiny target and draft agree on every token, so s3k1d4 accepts 3 drafts + the bonus token.
    accepts = parse_log(_log("ok-fixed.log")).decode_accept_lens
    assert accepts and min(accepts) == pytest.approx(4.0, abs=0.05)
