"""A stage's figures from its request outcomes, computed as SGLang's bench_serving computes them.

Output throughput is Σ completion_tokens of the successful requests / stage duration, over the steady
window of the stage when the outcomes say when they were sent (``orchestrator.bench.steady``), with a
95 % confidence interval; TTFT and ITL
percentiles pool the successful requests; TPOT is ``(latency - ttft) / (completion_tokens - 1)`` per
request with more than one token. As in bench_serving, a figure with no sample (every request failed)
reads 0.0; ``completed`` says whether any figure means something.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from orchestrator.bench.steady import Arrival, Window, rate_interval, steady_window
from orchestrator.records import StageMetrics

if TYPE_CHECKING:
    from orchestrator.bench.client import RequestOutcome  # aiohttp: not loaded to check a spec

_MAX_ERRORS = 5


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) by linear interpolation between closest ranks.

    The same definition as numpy.percentile's default, so p50/p99 match bench_serving's numbers.
    """
    return percentiles(values, (q,))[0]


def percentiles(values: Sequence[float], qs: Sequence[float]) -> tuple[float, ...]:
    """Several percentiles of the same values, sorting them once."""
    if not values:
        raise ValueError("percentile of an empty sequence")
    ordered = sorted(values)
    last = len(ordered) - 1
    result = []
    for q in qs:
        if not 0.0 <= q <= 100.0:
            raise ValueError(f"percentile must lie in [0, 100], got {q}")
        position = last * q / 100.0
        low = math.floor(position)
        high = min(low + 1, last)
        result.append(ordered[low] + (ordered[high] - ordered[low]) * (position - low))
    return tuple(result)


def stage_metrics(concurrency: int, outcomes: Sequence[RequestOutcome], duration_s: float) -> StageMetrics:
    """Summarize one stage (one concurrency level)."""
    ok = [o for o in outcomes if o.success]
    output_tokens = sum(o.completion_tokens for o in ok)
    itls = [itl for o in ok for itl in o.itls_s]
    tpots = [(o.latency_s - o.ttft_s) / (o.completion_tokens - 1) for o in ok if o.completion_tokens > 1]
    ttft_p50, ttft_p99 = _ms_percentiles([o.ttft_s for o in ok])
    itl_p50, itl_p99 = _ms_percentiles(itls)
    tpot_p50, _ = _ms_percentiles(tpots)

    # Per-request accept length is completion_tokens / spec_verify_ct; pooling sums (not averaging
    # ratios) weighs each verify step equally, as the server's own average does.
    spec = [o for o in ok if o.spec_verify_ct]
    verify_steps = sum(o.spec_verify_ct or 0 for o in spec)
    accept_length = sum(o.completion_tokens for o in spec) / verify_steps if verify_steps else None

    errors: list[str] = []
    for o in outcomes:
        if not o.success and o.error not in errors:
            errors.append(o.error)
            if len(errors) == _MAX_ERRORS:
                break

    rate = 1.0 / duration_s if duration_s > 0 else 0.0
    window, tok_per_s, ci95 = Window(0.0, duration_s, False), output_tokens * rate, None
    if ok and all(o.sent_s is not None for o in outcomes):
        # A failed request ends at once and breaks the closed loop the steady window relies on: a stage
        # with failures is measured whole, as bench_serving does.
        if len(ok) == len(outcomes):
            window = steady_window(
                [o.sent_s or 0.0 for o in outcomes],
                [(o.sent_s or 0.0) + o.ttft_s for o in outcomes[:concurrency]],
                concurrency,
                duration_s,
            )
        if window.steady:  # the tokens of the requests sent in the window (see steady.py)
            events = [Arrival(o.sent_s or 0.0, o.completion_tokens) for o in ok]
        else:  # the whole stage: every token when it arrived
            events = [a for o in ok for a in arrivals(o)]
        interval = rate_interval(events, window)
        tok_per_s = interval.tok_per_s
        # Batch means assume a steady rate: over ramp and tail they are no interval (a 1 s stage of one
        # wave gave 0-5765 tok/s around 1049), so a stage measured whole has none.
        ci95 = (interval.low, interval.high) if window.steady else None
    return StageMetrics(
        concurrency=concurrency,
        num_requests=len(outcomes),
        completed=len(ok),
        failed=len(outcomes) - len(ok),
        duration_s=duration_s,
        output_tok_per_s=tok_per_s,
        request_per_s=len(ok) * rate,
        ttft_p50_ms=ttft_p50,
        ttft_p99_ms=ttft_p99,
        itl_p50_ms=itl_p50,
        itl_p99_ms=itl_p99,
        tpot_p50_ms=tpot_p50,
        accept_length=accept_length,
        retractions=sum(o.num_retractions for o in outcomes),
        errors=tuple(errors),
        window_s=window.length_s,
        steady=window.steady,
        output_tok_per_s_ci95=ci95,
    )


def _ms_percentiles(values_s: Sequence[float]) -> tuple[float, float]:
    """p50 and p99 in milliseconds; 0.0 for no samples, as bench_serving reports."""
    if not values_s:
        return 0.0, 0.0
    p50, p99 = percentiles(values_s, (50.0, 99.0))
    return p50 * 1000.0, p99 * 1000.0


def arrivals(outcome: RequestOutcome) -> list[Arrival]:
    """When each of a request's tokens arrived, in seconds after the stage began: the first chunk's
    tokens at its TTFT, then one token per inter-token latency (a speculative chunk's tokens are spread
    evenly over its gap, as its ITLs are)."""
    if outcome.sent_s is None or outcome.completion_tokens == 0:
        return []
    t = outcome.sent_s + outcome.ttft_s
    out = [Arrival(t, outcome.completion_tokens - len(outcome.itls_s))]
    for itl in outcome.itls_s:
        t += itl
        out.append(Arrival(t, 1))
    return out
