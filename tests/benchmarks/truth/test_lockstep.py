"""A stage of lockstep waves as the client runs and reads it (`benchmarks.truth.lockstep`)."""

from __future__ import annotations

import pytest

from benchmarks.truth.lockstep import ClientView, client_view
from orchestrator.bench.client import RequestOutcome
from orchestrator.bench.metrics import stage_metrics

OUT = 128


def view(prompts: int, concurrency: int, batch: int, wave: float, min_stage_s: float = 0.0) -> ClientView:
    return client_view(
        prompts=prompts, concurrency=concurrency, batch=batch, output_len=OUT,
        wave_s=lambda k: wave, prefill_s=lambda k: 0.1 * wave, min_stage_s=min_stage_s,
    )  # fmt: skip


def test_a_steady_window_spans_whole_waves_and_reads_their_rate() -> None:
    # 6 waves of 32: the window spans the second to the fifth and counts their 4 x 32 requests. (The H200's
    # record of s3k1d4 at 32, 2704.7 tok/s from waves of 1.88 s, is 159/128 of this: it was read by a
    # window that ended at the last send and counted the last wave's sends but one.)
    got = view(192, 32, 32, 1.88)
    assert got.window.steady and got.requests == 192
    assert got.window.length_s == pytest.approx(4 * 1.88, abs=1e-3)  # to the last wave's first send
    assert got.tok_per_s == pytest.approx(32 * OUT / 1.88, rel=1e-4)
    assert got.tok_per_s * (4 * 32 + 31) / (4 * 32) == pytest.approx(2704.7, rel=0.005)


def test_a_stage_of_three_waves_is_measured_whole_at_the_waves_rate() -> None:
    got = view(96, 32, 32, 3.829)
    assert not got.window.steady
    assert got.duration_s == pytest.approx(3 * 3.829)
    assert got.tok_per_s == pytest.approx(32 * OUT / 3.829)


@pytest.mark.parametrize(("wave", "requests"), [(1.881, 192), (2.022, 160), (0.700, 120), (1.082, 96)])
def test_the_stage_is_extended_to_its_minimum_length_as_on_the_h200(wave: float, requests: int) -> None:
    """The H200's records: s3k1d4 and s3k3d4 at 32, the baseline and s3k1d4 at 8 (min_stage_s 10)."""
    concurrency = 32 if requests in (192, 160) else 8
    assert view(96, concurrency, concurrency, wave, min_stage_s=10.0).requests == requests


def test_the_figure_is_the_clients_own_reading_of_those_sends() -> None:
    """The same schedule as request outcomes, read by `bench.metrics.stage_metrics` (what a trial runs)."""
    wave, concurrency = 0.5, 4
    got = view(40, concurrency, concurrency, wave)
    outcomes = []
    for i in range(40):
        sent = (i // concurrency) * wave + (i % concurrency) * 1e-6
        itls = (0.9 * wave / (OUT - 1),) * (OUT - 1)
        outcomes.append(
            RequestOutcome(
                success=True, error="", prompt_tokens=8, completion_tokens=OUT, ttft_s=0.1 * wave,
                latency_s=wave - 1e-6 * (i % concurrency), itls_s=itls, spec_verify_ct=None,
                num_retractions=0, finish_reason="length", sent_s=sent,
            )
        )  # fmt: skip
    measured = stage_metrics(concurrency, outcomes, got.duration_s)
    assert measured.steady and got.window.steady
    assert got.tok_per_s == pytest.approx(measured.output_tok_per_s)
    assert got.tok_per_s == pytest.approx(concurrency * OUT / wave)  # whole waves, nothing of the last


def test_slots_beyond_the_batch_queue_and_the_window_opens_once_every_first_request_has_a_token() -> None:
    # 8 slots, waves of 4: the second four of the first sends wait a wave for the server.
    got = view(64, 8, 4, 0.5)
    assert got.window.steady
    assert got.window.start_s == pytest.approx(0.5 + 0.1 * 0.5)
    assert got.duration_s == pytest.approx(16 * 0.5)
    assert got.tok_per_s == pytest.approx(4 * OUT / 0.5, rel=0.25)
