import random
import statistics

import pytest

from orchestrator.bench.client import RequestOutcome
from orchestrator.bench.metrics import percentile, percentiles, stage_metrics


def outcome(
    tokens: int = 4,
    ttft: float = 0.1,
    itls: tuple[float, ...] = (0.02, 0.02, 0.02),
    verify: int | None = None,
    retractions: int = 0,
    error: str = "",
) -> RequestOutcome:
    return RequestOutcome(
        success=not error,
        error=error,
        prompt_tokens=10,
        completion_tokens=tokens,
        ttft_s=ttft,
        latency_s=ttft + sum(itls),
        itls_s=itls,
        spec_verify_ct=verify,
        num_retractions=retractions,
        finish_reason="length" if not error else "",
    )


def test_percentile_interpolates_linearly_like_numpy() -> None:
    assert percentile([4.0, 1.0, 3.0, 2.0], 50) == 2.5
    assert percentile([1.0, 2.0, 3.0, 4.0], 99) == pytest.approx(3.97)  # numpy.percentile gives 3.97
    assert percentile([1.0, 2.0, 3.0, 4.0], 0) == 1.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 100) == 4.0
    assert percentile([5.0], 99) == 5.0


def test_percentile_agrees_with_statistics_inclusive_quantiles() -> None:
    rng = random.Random(0)
    values = [rng.expovariate(1.0) for _ in range(501)]
    cuts = statistics.quantiles(values, n=100, method="inclusive")
    for q in (1, 25, 50, 90, 99):
        assert percentile(values, q) == pytest.approx(cuts[q - 1], rel=1e-12)
    assert percentiles(values, (50, 99)) == (percentile(values, 50), percentile(values, 99))


@pytest.mark.parametrize(("values", "q"), [([], 50), ([1.0], -1), ([1.0], 100.5)])
def test_percentile_rejects_empty_input_and_out_of_range_q(values: list[float], q: float) -> None:
    with pytest.raises(ValueError):
        percentile(values, q)


def test_throughput_is_completion_tokens_of_successes_over_duration() -> None:
    outcomes = [outcome(tokens=100), outcome(tokens=50), outcome(tokens=999, error="HTTP 500")]
    m = stage_metrics(8, outcomes, duration_s=2.0)
    assert m.concurrency == 8
    assert (m.num_requests, m.completed, m.failed) == (3, 2, 1)
    assert m.output_tok_per_s == 75.0
    assert m.request_per_s == 1.0
    assert m.duration_s == 2.0


def test_latency_percentiles_in_ms_and_tpot_follow_bench_serving() -> None:
    # TPOT = (latency - ttft) / (tokens - 1): 0.06 / 3 = 20 ms and 0.3 / 3 = 100 ms.
    fast = outcome(tokens=4, ttft=0.1, itls=(0.02, 0.02, 0.02))
    slow = outcome(tokens=4, ttft=0.3, itls=(0.1, 0.1, 0.1))
    one_token = outcome(tokens=1, ttft=0.2, itls=())  # no TPOT for a single token
    m = stage_metrics(2, [fast, slow, one_token], duration_s=1.0)
    assert m.ttft_p50_ms == pytest.approx(200.0)
    assert m.ttft_p99_ms == pytest.approx(298.0)  # 200 + 0.98 * (300 - 200)
    assert m.itl_p50_ms == pytest.approx(60.0)  # halfway between 20 and 100
    assert m.itl_p99_ms == pytest.approx(100.0)
    assert m.tpot_p50_ms == pytest.approx(60.0)  # median of 20 and 100


def test_accept_length_pools_tokens_over_verify_steps_of_successful_speculative_requests() -> None:
    outcomes = [
        outcome(tokens=128, verify=32),  # 4.0
        outcome(tokens=128, verify=127),  # 1.0079
        outcome(tokens=64, verify=None),  # no speculation info: left out
        outcome(tokens=64, verify=4, error="stream ended before the final chunk"),  # failed: left out
    ]
    m = stage_metrics(4, outcomes, duration_s=1.0)
    assert m.accept_length == pytest.approx(256 / 159)


def test_no_speculation_gives_no_accept_length() -> None:
    m = stage_metrics(1, [outcome(verify=None), outcome(verify=0)], duration_s=1.0)
    assert m.accept_length is None


def test_retractions_summed_and_errors_distinct_in_order_first_five() -> None:
    errors = ["a", "b", "a", "c", "d", "e", "f", "g"]
    outcomes = [outcome(retractions=2), outcome(retractions=1, error="a")]
    outcomes += [outcome(error=e) for e in errors]
    m = stage_metrics(3, outcomes, duration_s=1.0)
    assert m.retractions == 3
    assert m.errors == ("a", "b", "c", "d", "e")


def test_a_stage_where_everything_failed_reads_zero_and_no_accept_length() -> None:
    m = stage_metrics(4, [outcome(error="x"), outcome(error="x")], duration_s=3.0)
    assert (m.completed, m.failed) == (0, 2)
    assert m.output_tok_per_s == 0.0 and m.ttft_p50_ms == 0.0 and m.itl_p99_ms == 0.0
    assert m.accept_length is None
    assert m.errors == ("x",)
