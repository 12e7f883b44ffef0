"""The simulator's slow noise: a per-launch offset and a drift within one server, seeded per launch."""

from __future__ import annotations

import asyncio
import io

from orchestrator.config.draft_tree import DraftTree
from orchestrator.sim.logtext import SglangLog
from orchestrator.sim.profile import load_profile
from orchestrator.sim.scheduler import Scheduler
from orchestrator.sim.speed import SlowNoise, SpeedModel, position_probs

TREE = DraftTree(3, 1, 4)


def test_same_launch_seed_same_noise_and_other_seeds_differ() -> None:
    a, b = SlowNoise(0.075, 0.1, 0.75, 7), SlowNoise(0.075, 0.1, 0.75, 7)
    assert [a.factor(t / 4) for t in range(40)] == [b.factor(t / 4) for t in range(40)]
    offsets = {round(SlowNoise(0.075, 0.1, 0.75, seed).offset, 6) for seed in range(20)}
    assert len(offsets) == 20


def test_drift_holds_for_its_period_then_moves() -> None:
    n = SlowNoise(0.0, 0.1, 0.5, 3)
    assert n.offset == 1.0
    assert n.factor(0.0) == n.factor(0.49)
    assert len({n.factor(0.5 * i) for i in range(10)}) == 10


def test_no_noise_is_flat() -> None:
    n = SlowNoise(0.0, 0.0, 0.75, 11)
    assert {n.factor(t / 3) for t in range(30)} == {1.0}


def _elapsed(launch_seed: int) -> float:
    profile = load_profile(
        {"base": "h200-tiny", "accept_p0": 0.8, "step_noise": 0.0, "drift_noise": 0.0,
         "launch_noise": 0.2, "launch_seed": launch_seed}
    )  # fmt: skip

    async def main() -> float:
        sched = Scheduler(
            speed=SpeedModel(profile, 1, TREE, (1, 2, 4, 8, 16)), probs=position_probs(profile, TREE),
            pool_tokens=100_000, max_running=16, chunked_prefill=8192, decode_log_interval=10,
            vocab=1000, seed=0, log=SglangLog(1, io.StringIO()),
        )  # fmt: skip
        task = asyncio.create_task(sched.run())
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        reqs = [sched.submit(16, 120) for _ in range(8)]
        await asyncio.gather(*(r.done.wait() for r in reqs))
        task.cancel()
        return loop.time() - t0

    return asyncio.run(main())


def test_a_launch_runs_at_its_own_offset() -> None:
    # Two launch seeds whose offsets are far apart: the same work takes longer on the slower launch,
    # by about the ratio of the offsets (the per-request acceptance is the same for both; the event
    # loop's own overhead per step, which no offset scales, keeps the measured ratio a little lower).
    seeds = sorted(range(50), key=lambda s: SlowNoise(0.2, 0.0, 0.75, s).offset)
    slow, fast = seeds[0], seeds[-1]
    ratio = SlowNoise(0.2, 0.0, 0.75, fast).offset / SlowNoise(0.2, 0.0, 0.75, slow).offset
    assert ratio > 1.3
    measured = _elapsed(slow) / _elapsed(fast)
    assert 1 + (ratio - 1) * 0.5 < measured < ratio * 1.1
