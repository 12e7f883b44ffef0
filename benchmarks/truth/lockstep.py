"""A stage of lockstep waves as the benchmark client runs it and reads it, computed without a server.

With equal lengths a server's running batch moves in waves: its requests prefill together, decode
together and finish together, and the client's slots send their next requests in one burst. The client
measures a stage through `orchestrator.bench.steady`: a steady window from one send to another, and the
output tokens of the requests sent inside it. The oracle does not derive that figure from the waves; it
replays the client's closed loop over them and hands the send times to the client's own window code, so
it stays the client's figure whatever that code counts. (It counted wrong once: a window that ended at
the very last send took in the last burst's other sends, and every steady stage the H200 ran read
``(waves - 2) * batch + batch - 1`` requests over ``waves - 2`` waves, 24 % above the wave's rate at 6
waves of 32. The window now ends at the last burst's first send.)
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from orchestrator.bench.steady import Arrival, Window, rate_interval, steady_window

# One burst's sends leave one after another (each slot sends as its own request ends): only their order
# matters to the window, which ends at the first of the last burst.
_SEND_GAP_S = 1e-6


@dataclass(frozen=True)
class ClientView:
    """What the client measures of a stage."""

    requests: int  # sent in all, once the client has extended the stage to its minimum length
    duration_s: float
    window: Window
    tok_per_s: float


def client_view(
    *,
    prompts: int,
    concurrency: int,
    batch: int,
    output_len: int,
    wave_s: Callable[[int], float],
    prefill_s: Callable[[int], float],
    min_stage_s: float = 0.0,
    min_stage_tokens: int = 0,
) -> ClientView:
    """The client's closed loop over a server that runs waves of up to ``batch`` queued requests.

    ``wave_s(k)`` is a wave of ``k`` requests, ``prefill_s(k)`` its prefill (when their first tokens
    come). As `bench.client.run_stage`: ``concurrency`` slots, each sending its next request when its
    last one ends, cycling through the prompts until the stage has lasted ``min_stage_s`` and its
    finished requests hold ``min_stage_tokens``.
    """
    if prompts < 1 or concurrency < 1 or batch < 1:
        raise ValueError(f"a stage needs prompts, slots and a batch: {prompts}, {concurrency}, {batch}")
    sent: list[float] = []
    ready: dict[int, float] = {}  # first-token time of the first wave's requests (the first slots')
    queue: deque[int] = deque()  # sent, not yet in a wave: the server takes them in the order sent
    tokens = 0

    def send(at: float, order: int) -> None:
        queue.append(len(sent))
        sent.append(at + order * _SEND_GAP_S)

    for slot in range(min(concurrency, prompts)):
        send(0.0, slot)
    now = 0.0
    while queue:
        wave = [queue.popleft() for _ in range(min(batch, len(queue)))]
        for request in wave:
            if request < concurrency:
                ready[request] = now + prefill_s(len(wave))
        now += wave_s(len(wave))
        for order, _ in enumerate(wave):
            tokens += output_len
            more = len(sent) < prompts or now < min_stage_s or tokens < min_stage_tokens
            if more:
                send(now, order)
    window = steady_window(sent, [ready[i] for i in sorted(ready)], concurrency, now)
    if window.steady:  # the tokens of the requests sent inside the window
        rate = rate_interval([Arrival(t, output_len) for t in sent], window).tok_per_s
    else:  # the whole stage: every token over its duration
        rate = len(sent) * output_len / now
    return ClientView(len(sent), now, window, rate)
