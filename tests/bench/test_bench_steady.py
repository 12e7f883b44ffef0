"""The steady window of a stage and its batch-means interval."""

from __future__ import annotations

import random

import pytest

from orchestrator.bench.client import RequestOutcome
from orchestrator.bench.metrics import arrivals, stage_metrics
from orchestrator.bench.steady import Arrival, Window, rate_interval, steady_window, t975


def test_t_quantiles_are_students_and_approach_the_normal() -> None:
    assert t975(1) == pytest.approx(12.706)
    assert t975(9) == pytest.approx(2.262)
    assert t975(200) == pytest.approx(1.96)
    with pytest.raises(ValueError):
        t975(0)


def test_window_runs_from_the_first_second_request_of_a_slot_to_the_send_a_wave_before_the_last() -> None:
    # Concurrency 2: requests 0 and 1 open the stage, request 2 is the first one a slot sends again.
    sent = [0.0, 0.0, 1.5, 1.7, 3.0, 3.3, 4.5, 4.8, 6.0, 6.2, 7.5, 7.7, 9.0]
    w = steady_window(sent, [0.4, 0.5], concurrency=2, duration_s=10.0)
    assert (w.start_s, w.end_s, w.steady) == (1.5, 7.7, True)  # sent[13 - 2]: two before the last
    # The first wave's first tokens bound it too (a slot freed before every slot had started).
    assert steady_window(sent, [0.4, 2.0], concurrency=2, duration_s=10.0).start_s == 2.0
    # Fewer than three turnovers of every slot inside: a window that short hangs on where waves fall.
    assert not steady_window(sent[:7], [0.4, 0.5], concurrency=2, duration_s=6.0).steady


def test_a_stage_without_a_steady_part_is_measured_whole() -> None:
    # Every request sent at once (one pass at full concurrency): ramp and tail are all there is.
    w = steady_window([0.0, 0.0], [0.3, 0.3], concurrency=2, duration_s=2.0)
    assert (w.start_s, w.end_s, w.steady) == (0.0, 2.0, False)
    # A window under a fifth of the stage is mostly ramp-up: the whole stage again.
    assert not steady_window([0.0, 1.0, 1.3], [0.2], concurrency=1, duration_s=2.0).steady


def test_whole_waves_give_the_wave_rate_whatever_the_decode_speed() -> None:
    # Equal lengths move in waves: 4 requests prefill for 0.3 s, then decode 20 tokens each at 10 ms a
    # token, finish together, and the next 4 are sent. The true rate is 80 tokens per 0.5 s wave.
    outcomes = []
    for wave in range(6):
        for _ in range(4):
            outcomes.append(_sent(wave * 0.5, 0.3 + 0.01, 20, 0.01))
    duration = 6 * 0.5
    m = stage_metrics(4, outcomes, duration)
    assert m.steady
    assert m.output_tok_per_s == pytest.approx(160.0, rel=0.05)


@pytest.mark.parametrize("waves", [5, 6, 7])
def test_waves_sent_a_little_apart_give_the_wave_rate_whatever_their_count(waves: int) -> None:
    # As on a real server: a wave's 32 requests finish within a few ms of each other, so their slots
    # send the next wave a little apart. A window that ended at the last send counted the last wave's
    # sends but one: (waves - 2) x 32 + 31 requests over (waves - 2) waves, 32 % above the wave rate with
    # 5 waves and 24 % with 6, so the figure hung on how many waves the stage happened to hold.
    concurrency, wave_s, tokens = 32, 2.0, 128
    outcomes = [
        _sent(wave * wave_s + slot * 0.001, 0.2, tokens, (wave_s - 0.25) / tokens)
        for wave in range(waves)
        for slot in range(concurrency)
    ]
    m = stage_metrics(concurrency, outcomes, waves * wave_s)
    assert m.steady
    assert m.output_tok_per_s == pytest.approx(concurrency * tokens / wave_s, rel=0.01)


def test_a_constant_rate_has_a_tight_interval_around_it() -> None:
    ticks = [Arrival(i * 0.01, 3) for i in range(1000)]  # 300 tok/s for 10 s
    iv = rate_interval(ticks, Window(0.0, 10.0, True))
    assert iv.tok_per_s == pytest.approx(300.0, rel=0.01)
    assert iv.batches == 10
    assert iv.low <= iv.tok_per_s <= iv.high
    assert iv.high - iv.low < 0.02 * iv.tok_per_s


def test_a_drifting_rate_has_an_interval_that_covers_its_true_mean() -> None:
    # Throughput that holds each value for a second (as a real server drifts): the batch-means interval
    # covers the true mean in about 95 % of stages, where per-token samples would be far too narrow.
    covered = 0
    for seed in range(200):
        rng = random.Random(seed)
        ticks: list[Arrival] = []
        for second in range(20):
            rate = 1000.0 * rng.gauss(1.0, 0.1)  # tokens per second in this second, mean 1000
            n = 100
            ticks += [Arrival(second + (i + 0.5) / n, round(rate / n)) for i in range(n)]
        iv = rate_interval(ticks, Window(0.0, 20.0, True))
        covered += iv.low <= 1000.0 <= iv.high
    assert 180 <= covered <= 200


def test_no_tokens_or_no_window_gives_zero() -> None:
    assert rate_interval([], Window(0.0, 1.0, True)).tok_per_s == 0.0
    assert rate_interval([Arrival(0.5, 3)], Window(1.0, 1.0, False)).tok_per_s == 0.0


def _sent(at: float, ttft: float, tokens: int, itl: float) -> RequestOutcome:
    itls = (itl,) * (tokens - 1)
    return RequestOutcome(
        success=True, error="", prompt_tokens=8, completion_tokens=tokens, ttft_s=ttft,
        latency_s=ttft + sum(itls), itls_s=itls, spec_verify_ct=None, num_retractions=0,
        finish_reason="length", sent_s=at,
    )  # fmt: skip


def test_arrivals_put_the_first_chunk_at_ttft_and_then_one_token_per_itl() -> None:
    o = _sent(1.0, 0.5, 4, 0.1)
    o = RequestOutcome(**{**o.__dict__, "completion_tokens": 5})  # a first chunk of two tokens
    got = arrivals(o)
    assert [a.tokens for a in got] == [2, 1, 1, 1]
    assert [round(a.at_s, 6) for a in got] == [1.5, 1.6, 1.7, 1.8]


def test_stage_tok_s_is_the_steady_rate_not_diluted_by_ramp_and_tail() -> None:
    # Concurrency 2, staggered slots: each sends 20-token requests back to back (0.2 s prefill, then a
    # token every 10 ms: 0.39 s a request), but the very first request of each slot waits 1 s for a cold
    # prefill. Whole-stage tok/s counts that ramp and the draining end; the steady rate is 2 x 20 / 0.39.
    outcomes: list[RequestOutcome] = []
    for slot in range(2):
        t = slot * 0.2
        for i in range(12):
            ttft = 1.0 if i == 0 else 0.2
            outcomes.append(_sent(t, ttft, 20, 0.01))
            t += ttft + 19 * 0.01
    outcomes.sort(key=lambda o: o.sent_s or 0.0)
    duration = max((o.sent_s or 0.0) + o.latency_s for o in outcomes)
    m = stage_metrics(2, outcomes, duration)
    assert m.steady and m.window_s < duration
    assert m.output_tok_per_s == pytest.approx(40 / 0.39, rel=0.05)
    assert 480 / duration < 0.9 * m.output_tok_per_s
    assert m.output_tok_per_s_ci95 is not None
    low, high = m.output_tok_per_s_ci95
    assert low <= m.output_tok_per_s <= high


def test_outcomes_without_send_times_keep_the_whole_stage_figure() -> None:
    o = _sent(0.0, 0.1, 4, 0.02)
    legacy = RequestOutcome(**{**o.__dict__, "sent_s": None})
    m = stage_metrics(1, [legacy, legacy], 2.0)
    assert m.output_tok_per_s == 4.0 and not m.steady and m.output_tok_per_s_ci95 is None


def test_a_stage_without_a_steady_part_has_no_interval() -> None:
    """One wave at full concurrency is all ramp and tail: batch means over it are no interval (they
    assume a stationary rate), and MLflow showed 0-5765 tok/s around a trial's 1049 from such a stage."""
    outcomes = [_sent(0.0, 0.3 + 0.01 * i, 40, 0.02) for i in range(16)]
    duration = max((o.sent_s or 0.0) + o.latency_s for o in outcomes)
    m = stage_metrics(16, outcomes, duration)
    assert not m.steady and m.output_tok_per_s > 0
    assert m.output_tok_per_s_ci95 is None
