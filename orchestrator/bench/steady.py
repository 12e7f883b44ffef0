"""The steady part of a stage and how sure its throughput is.

A stage starts with a ramp-up (every slot sends its first request and waits for its prefill) and ends
with a tail (no request is left to send, so the slots empty one by one). Neither is the throughput a
user gets from a loaded server, and in a short stage they are most of it. The steady window runs from
the first time a slot sends its *second* request (the first wave has been prefilled and one of its
requests has finished) to the send ``concurrency`` before the last: all the while, ``concurrency``
requests are in flight. Both ends are send times on purpose: with equal lengths the requests move in waves
(prefill together, decode together, finish together), and a window from the first send of one wave to the
first send of another spans whole waves, so it neither catches a wave's fast decode without the prefill
that pays for it nor the reverse. The end is the last wave's *first* send, not its last: a wave's slots
send a few milliseconds apart, and a window that ended at the very last send counted all of the last
wave's sends but one (on the H200, 31 requests too many at concurrency 32: 24-32 % above the wave rate,
by how many waves the stage held).

Within the window the stage runs a closed loop: a slot sends its next request the moment its last one
finishes, so sends keep pace with completions. The throughput is the output tokens of the requests sent
in the window over its length; counting sends rather than token arrivals keeps a window of a few waves
from depending on where in a wave it happens to start.

The interval comes from batch means: the window is cut into equal batches and the tok/s of each batch
is one sample. Consecutive seconds of one server are correlated (its throughput drifts), so treating
every second as independent would give too narrow an interval; batches of a second or more are close to
independent, and a Student t with ``batches - 1`` degrees of freedom covers the few there are.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

# Student t, two-sided 95 %, by degrees of freedom (1..30); beyond 30 the normal 1.96 is close enough.
_T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip
MAX_BATCHES = 10
MIN_BATCH_S = 1.0  # a batch of a second or more: about one drift period of a real server
MIN_STEADY_SHARE = 0.2  # a window shorter than this share of the stage is mostly ramp: use the whole stage
# Every slot must turn over this often inside the window: a window of a wave or two hangs on where the
# waves fall, and the whole stage is the steadier figure then.
MIN_TURNOVERS = 3


def t975(dof: int) -> float:
    """The 97.5 % quantile of Student's t with ``dof`` degrees of freedom (at least 1)."""
    if dof < 1:
        raise ValueError(f"degrees of freedom must be at least 1, got {dof}")
    return _T975[dof - 1] if dof <= len(_T975) else 1.96


@dataclass(frozen=True)
class Arrival:
    """An event of ``tokens`` output tokens ``at_s`` seconds after the stage started (a request sent
    with its output tokens, or tokens received)."""

    at_s: float
    tokens: int


@dataclass(frozen=True)
class Window:
    start_s: float
    end_s: float
    steady: bool  # False: no steady part long enough, so the whole stage

    @property
    def length_s(self) -> float:
        return self.end_s - self.start_s


@dataclass(frozen=True)
class Interval:
    """Tok/s over a window, its 95 % confidence interval and what it was computed from."""

    tok_per_s: float
    low: float
    high: float
    tokens: int
    batches: int


def steady_window(
    sent_s: Sequence[float], first_wave_ready_s: Sequence[float], concurrency: int, duration_s: float
) -> Window:
    """The window in which every slot is busy.

        ``sent_s``: when each request was sent, in the order sent; ``first_wave_ready_s``: when each request
        of the first wave (the first ``concurrency`` sent) got its first token; ``duration_s``: the stage.
        Without a second wave (one pass at full concurrency), or with fewer than ``MIN_TURNOVERS`` sends per
    slot inside the window, there is no steady part to trust: the whole stage.
    """
    if duration_s <= 0:
        return Window(0.0, 0.0, False)
    whole = Window(0.0, duration_s, False)
    if len(sent_s) <= concurrency:
        return whole
    sent_s = sorted(sent_s)  # in the order sent, whatever order the outcomes came back in
    start = max(sent_s[concurrency], max(first_wave_ready_s, default=0.0))
    # Sends in [start, end) are those of sent_s[concurrency:-concurrency]: whole waves when they are.
    end = min(sent_s[len(sent_s) - concurrency], duration_s)
    sends_inside = sum(1 for t in sent_s if start <= t < end)
    if end - start < MIN_STEADY_SHARE * duration_s or sends_inside < MIN_TURNOVERS * concurrency:
        return whole
    return Window(start, end, True)


def rate_interval(arrivals: Sequence[Arrival], window: Window) -> Interval:
    """Tok/s in ``window`` with a 95 % batch-means interval.

    Batches are at least ``MIN_BATCH_S`` long when the window allows two of them, else the window is cut
    in two: a stage that short gets the wide interval it deserves. With no tokens, or a window of no
    length, the interval is the point 0.
    """
    length = window.length_s
    # A steady window leaves its end out: it ends at the last wave's first send, whose wave is the tail's.
    inside = [
        a
        for a in arrivals
        if window.start_s <= a.at_s < window.end_s or (not window.steady and a.at_s == window.end_s)
    ]
    tokens = sum(a.tokens for a in inside)
    if length <= 0 or tokens == 0:
        return Interval(0.0, 0.0, 0.0, tokens, 0)
    rate = tokens / length
    batches = max(2, min(MAX_BATCHES, math.floor(length / MIN_BATCH_S)))
    width = length / batches
    counts = [0] * batches
    for a in inside:
        counts[min(batches - 1, int((a.at_s - window.start_s) / width))] += a.tokens
    rates = [c / width for c in counts]
    mean = sum(rates) / batches
    sd = math.sqrt(sum((r - mean) ** 2 for r in rates) / (batches - 1))
    half = t975(batches - 1) * sd / math.sqrt(batches)
    return Interval(rate, max(0.0, rate - half), rate + half, tokens, batches)
