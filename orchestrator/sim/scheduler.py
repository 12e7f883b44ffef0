"""The simulated scheduler: SGLang's continuous batching, in real time, on a simulated KV pool.

At most ``max_running_requests`` decode together; the rest wait. A prefill batch admits waiting
requests while the pool can hold their prompts plus an estimate of what they will still generate (the
``new_token_ratio`` SGLang uses); a decode step needs room for every running request's next tokens
(the whole draft tree when speculating) and, when the pool cannot give it, retracts requests back to
the queue, to be prefilled again later: the throughput cliff of a too-small pool. Each step sleeps for
the speed model's duration, so clients measure real wall-clock rates.
"""

from __future__ import annotations

import asyncio
import math
import random
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace

from orchestrator.config.draft_tree import DraftTree
from orchestrator.footprint.sglang_defaults import (
    INIT_NEW_TOKEN_RATIO,
    MIN_NEW_TOKEN_RATIO,
    NEW_TOKEN_RATIO_DECAY,
)
from orchestrator.sim.logtext import SglangLog, decode_line, prefill_line, retract_line
from orchestrator.sim.request_state import SimRequest, Stats
from orchestrator.sim.speed import SlowNoise, SpeedModel, sample_accepted
from orchestrator.sim.tiers import TierController

# How far behind its deadline a step may start and still be caught up, in steps: a GPU's queue holds the
# host's work of a step or two ahead, so a host pause within it costs the GPU nothing (`Scheduler._sleep`).
HOST_DEBT_STEPS = 2


@dataclass(frozen=True)
class ServingMemory:
    """What a forward may allocate while serving (`SimProfile.serving_gib_per_token`), and who is told
    when one runs out."""

    free_gib: float  # free once start-up is done
    gib_per_token: float
    after_requests: int  # completed before a forward over the limit fails
    on_oom: Callable[[float], None]  # the need in GiB of the forward that failed


class Scheduler:
    """Runs as one asyncio task inside the server's event loop."""

    def __init__(
        self,
        *,
        speed: SpeedModel,
        probs: list[float],
        pool_tokens: int,
        max_running: int,
        chunked_prefill: int,
        decode_log_interval: int,
        vocab: int,
        seed: int,
        log: SglangLog,
        lossy_rate: float = 0.0,
        near_tie_flips: bool = False,
        tiers: TierController | None = None,
        serving: ServingMemory | None = None,
    ) -> None:
        self.speed = speed
        self.serving = serving
        self.dead = False  # a forward ran out of memory: the scheduler process is gone
        self._completed = 0  # requests completed over the server's life
        self.probs = probs
        self.lossy_rate = lossy_rate
        self.near_tie_flips = near_tie_flips
        self.tiers = tiers
        self._runtime_steps: int | None = None  # the tier the last verify step ran at (adaptive)
        self._tier_speeds: dict[int, SpeedModel] = {}
        self.pool = pool_tokens
        self.max_running = max_running
        self.chunked = chunked_prefill
        self.log_interval = decode_log_interval
        self.vocab = vocab
        self.seed = seed
        self.log = log
        self.waiting: deque[SimRequest] = deque()
        self.running: list[SimRequest] = []
        self.stats = Stats()
        self.new_token_ratio = INIT_NEW_TOKEN_RATIO
        self._rng = random.Random(seed)
        self._count = 0
        self._wake = asyncio.Event()
        self._deadline = 0.0
        self._last_prefill = time.monotonic()
        self._interval = (0, 0, 0, time.monotonic())  # steps, tokens, verifies, start
        self._last_graph = True
        self._slow = SlowNoise.for_profile(speed.profile)
        self._born = time.monotonic()

    # ------------------------------------------------------------------------------------------
    @property
    def used(self) -> int:
        return sum(r.kv for r in self.running)

    @property
    def idle(self) -> bool:
        return not self.waiting and not self.running

    def submit(
        self,
        input_len: int,
        max_new_tokens: int,
        *,
        probs: list[float] | None = None,
        greedy: random.Random | None = None,
        tie_key: int | None = None,
    ) -> SimRequest:
        """Queue a request; its output ids come from ``greedy`` (the prompt's own continuation) or its
        own seeded generator (same seed, same ids)."""
        rng = random.Random(self.seed * 1_000_003 + self._count)
        self._count += 1
        req = SimRequest(
            uuid.UUID(int=rng.getrandbits(128)).hex,
            input_len,
            max_new_tokens,
            rng,
            self.vocab,
            probs,
            greedy,
            tie_key,
        )
        self.waiting.append(req)
        self.stats.requests += 1
        self._wake.set()
        return req

    def abort(self, req: SimRequest) -> None:
        if req.finished:
            return
        if req in self.waiting:
            self.waiting.remove(req)
        if req in self.running:
            self.running.remove(req)
        req.kv = 0
        req.aborted = req.finished = True
        req.changed.set()
        req.done.set()

    def flush(self) -> bool:
        """``/flush_cache``: refused while anything is pending; resets the lifetime acceptance."""
        if not self.idle:
            return False
        self.stats.life_tokens = self.stats.life_verify = 0
        return True

    # ------------------------------------------------------------------------------------------
    async def run(self) -> None:
        self._deadline = asyncio.get_running_loop().time()
        while not self.dead:
            if self.waiting and len(self.running) < self.max_running:
                batch = self._admit()
                if batch:
                    await self._prefill(batch)
                    continue
            if self.running:
                await self._decode_step()
                continue
            self._wake.clear()
            await self._wake.wait()
            # Idle time is no step's: the first step after it is paced from its own start.
            self._deadline = asyncio.get_running_loop().time()

    async def _sleep(self, seconds: float) -> None:
        """Pace a step against the deadline clock: it ends ``seconds`` after the previous step's deadline,
        not after the moment the loop came back to it. The loop's timers wake up to a millisecond late
        (epoll counts whole milliseconds) and the step's own Python work (emitting tokens, streaming the
        chunks, logging) takes time too; measured from "now", both added about 0.9 ms to a 4.9 ms step.
        Against the deadline the next step absorbs them, as a GPU's step overlaps the host's work. The
        debt it may carry is bounded (`HOST_DEBT_STEPS`): a host pause beyond that is lost (the clock
        starts anew, the steps after it are not squeezed to catch up), one within it is not.
        With no debt carried, the fastest cells (6 ms steps at 32 running requests without speculation)
        came out 9-10 % short of the H200's on a host whose loop often came back a whole step late; with
        two steps, within 1.6 %."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        self._deadline = max(self._deadline + seconds, now - HOST_DEBT_STEPS * seconds)
        await asyncio.sleep(self._deadline - now)

    def _noisy(self, seconds: float) -> float:
        # A faster moment of the launch (factor above 1) makes each step shorter.
        seconds /= self._slow.factor(time.monotonic() - self._born)
        noise = self.speed.profile.step_noise
        if noise <= 0:
            return seconds
        return seconds * min(1.5, max(0.5, self._rng.gauss(1.0, noise)))

    def _reserved(self) -> int:
        return sum(math.ceil(r.remaining * self.new_token_ratio) for r in self.running)

    def _admit(self) -> list[SimRequest]:
        budget = self.pool - self.used - self._reserved()
        batch: list[SimRequest] = []
        tokens = 0
        while self.waiting and len(self.running) + len(batch) < self.max_running:
            req = self.waiting[0]
            need = req.prefill_len + math.ceil(req.remaining * self.new_token_ratio)
            if batch and tokens + req.prefill_len > self.chunked:
                break
            alone = not batch and not self.running and req.prefill_len + 1 <= self.pool - self.used
            if need > budget and not alone:
                break
            batch.append(self.waiting.popleft())
            tokens += req.prefill_len
            budget -= need
        return batch

    def _out_of_memory(self, tokens: int) -> bool:
        """Whether a forward of ``tokens`` tokens runs out of memory (then the scheduler is dead)."""
        if self.serving is None or self.dead:
            return self.dead
        need = tokens * self.serving.gib_per_token
        if need <= self.serving.free_gib or self._completed < self.serving.after_requests:
            return False
        self.dead = True
        self.serving.on_oom(need)
        return True

    async def _prefill(self, batch: list[SimRequest]) -> None:
        tokens = sum(r.prefill_len for r in batch)
        if self._out_of_memory(tokens):
            return
        await self._sleep(self._noisy(self.speed.prefill_time(tokens)))
        running_before = len(self.running)
        for req in batch:
            if req.aborted:
                continue
            if req.num_retractions == 0 or not req.output_ids:
                self.stats.prompt_tokens += req.input_len
            req.kv = req.prefill_len
            if req.remaining > 0:
                req.emit(1)  # the prefill's own token: the first chunk of a stream
                self.stats.generation_tokens += 1
            self.running.append(req)
            self._finish_if_done(req)
            req.changed.set()
        now = time.monotonic()
        throughput = tokens / max(now - self._last_prefill, 1e-6)
        self._last_prefill = now
        graph = self.speed.prefill_graphs and tokens >= 2
        self.log.line(
            prefill_line(
                seqs=len(batch), tokens=tokens, usage=self.used / self.pool, running=running_before,
                queued=len(self.waiting), graph=graph, throughput=throughput,
            ),
            rank=True,
        )  # fmt: skip

    def _finish_if_done(self, req: SimRequest) -> None:
        if req.remaining <= 0 and not req.finished:
            req.finished = True
            if req in self.running:
                self.running.remove(req)
            req.kv = 0
            self._completed += 1
            req.done.set()

    def _retract_for(self, per_req: int) -> None:
        """Free the pool for this step by sending the least advanced requests back to the queue."""
        victims: list[SimRequest] = []
        while len(self.running) > 1 and self.used + len(self.running) * per_req > self.pool:
            # SGLang's "length" policy: retract the request with the fewest outputs (longest prompt first).
            victim = min(self.running, key=lambda r: (len(r.output_ids), -r.input_len))
            self.running.remove(victim)
            victims.append(victim)
        if not victims:
            return
        gained = sum(v.kv for v in victims)
        for v in reversed(victims):
            v.kv = 0
            v.num_retractions += 1
            self.waiting.appendleft(v)
        self.new_token_ratio = min(1.0, max(self.new_token_ratio, 0.5) + 0.2)
        self.log.line(retract_line(len(victims), gained), rank=True)

    async def _decode_step(self) -> None:
        tree = self.speed.tree
        self._retract_for(tree.draft_tokens if tree is not None else 1)
        batch = len(self.running)
        if batch == 0 or self._out_of_memory(batch * (tree.draft_tokens if tree is not None else 1)):
            return
        speed, steps = self.speed, None
        if self.tiers is not None and tree is not None:
            steps = self.tiers.steps_for(batch)  # adaptive: this bucket's current tier
            if self._runtime_steps is not None and steps != self._runtime_steps:
                # As 0.5.17 prints it each time the batch moves to a bucket at another tier.
                self.log.line(
                    f"Switch adaptive runtime state: steps {self._runtime_steps} -> {steps}, "
                    f"draft_tokens {self._runtime_steps + 1} -> {steps + 1}",
                    rank=True,
                )
            self._runtime_steps = steps
            speed = self._tier_speed(steps)
        graph = speed.uses_graph(batch)
        await self._sleep(self._noisy(speed.step_time(batch)))
        produced = verifies = 0
        accepted_now: list[int] = []
        for req in list(self.running):
            if req.aborted:
                continue
            gained, wrong_at = 1, -1
            if tree is not None:
                probs = self.probs if req.probs is None else req.probs
                accepted = sample_accepted(req.rng, probs if steps is None else probs[:steps])
                accepted_now.append(accepted)
                req.record_verify(accepted)
                gained += accepted
                verifies += 1
                self.stats.life_tokens += gained
                self.stats.life_verify += 1
                if accepted and self.lossy_rate and req.rng.random() < self.lossy_rate:
                    wrong_at = req.rng.randrange(accepted)  # an accepted draft the target would not emit
            n = min(gained, req.remaining)
            req.emit(n, wrong_at, flip_ties=tree is not None and self.near_tie_flips)
            produced += n
            self._finish_if_done(req)
            req.changed.set()
        self.stats.generation_tokens += produced
        if self.tiers is not None and steps is not None:
            switched = self.tiers.observe(batch, accepted_now)
            if switched:
                self.log.line(switched, rank=True)
        self.new_token_ratio = max(MIN_NEW_TOKEN_RATIO, self.new_token_ratio - NEW_TOKEN_RATIO_DECAY)
        steps, tokens, vsum, start = self._interval
        steps, tokens, vsum = steps + 1, tokens + produced, vsum + verifies
        self._last_graph = graph
        if steps >= self.log_interval:
            self._log_decode(batch, tokens, vsum, start, graph)
            self._interval = (0, 0, 0, time.monotonic())
        else:
            self._interval = (steps, tokens, vsum, start)

    def _tier_speed(self, steps: int) -> SpeedModel:
        """The speed of a step at ``steps`` (0: plain decoding), each tier with its own graphs."""
        speed = self._tier_speeds.get(steps)
        if speed is None:
            tree = DraftTree(steps, 1, steps + 1) if steps > 0 else None
            speed = self._tier_speeds[steps] = replace(self.speed, tree=tree)
        return speed

    def _log_decode(self, batch: int, tokens: int, verifies: int, start: float, graph: bool) -> None:
        elapsed = max(time.monotonic() - start, 1e-6)
        self.stats.last_gen_throughput = tokens / elapsed
        accept_len = accept_rate = None
        tree = self.speed.tree
        if tree is not None and verifies:
            accept_len = tokens / verifies
            accept_rate = (accept_len - 1) / max(1, tree.draft_tokens - 1)
            self.stats.last_accept_len, self.stats.last_accept_rate = accept_len, accept_rate
        self.log.line(
            decode_line(
                running=batch, tokens=self.used, usage=self.used / self.pool, accept_len=accept_len,
                accept_rate=accept_rate, graph=graph, throughput=self.stats.last_gen_throughput,
                queued=len(self.waiting),
            ),
            rank=True,
        )  # fmt: skip
