"""Each concurrency level is called by the verdict's own test: a lead beyond the gap noise, from either
side."""

from __future__ import annotations

import pytest

from orchestrator.driver.answer.choose import clearly_ahead, lead, percent
from orchestrator.driver.answer.levels import LevelCall, LevelComparison


def test_clearly_ahead_is_a_lead_strictly_beyond_the_noise() -> None:
    assert lead(1.1, 1.0) == pytest.approx(0.1) and lead(0.9, 1.0) == pytest.approx(-0.1)
    assert clearly_ahead(1.06, 1.0, 0.05) and not clearly_ahead(1.0, 1.06, 0.05)
    assert not clearly_ahead(1.5, 1.0, 0.5)  # a lead equal to the noise is within it
    assert not clearly_ahead(1.0, 1.0, 0.0)
    # over a figure of nothing any lead is beyond the noise (the verdict's runner-up served nothing)
    assert lead(1.0, 0.0) == float("inf") and clearly_ahead(1.0, 0.0, 1e9)


def test_a_level_prints_its_figures_as_the_verdict_prints_them() -> None:
    assert percent(0.1234) == "12.3 %" and percent(-0.05) == "-5.0 %"
    level = LevelComparison(
        concurrency=32,
        speculative_tok_per_s=900.0,
        baseline_tok_per_s=1000.0,
        gap=lead(900.0, 1000.0),
        noise=0.031,
        call=LevelCall.LOSES,
    )
    assert level.describe() == (
        "32 concurrent: 900.0 against 1000.0 tok/s (-10.0 %, noise up to 3.1 %): speculation loses"
    )
    ahead = level.model_copy(update={"gap": 0.1, "call": LevelCall.PAYS})
    assert "(+10.0 %, noise up to 3.1 %): speculation pays" in ahead.describe()
