"""How fast a stage report reaches the driver, and its verdict the trial, through the trial event channel.

`python -m benchmarks.system.stage_latency`: a local Ray instance (its own temporary folder, no dashboard),
two stand-in trial tasks that report `--steps` stages each at random intervals through the same hook a real
trial uses (`driver.dispatch.trial_channel.stage_hook`), and a driver loop shaped like `Sweep.run`'s: it waits
on the trials' refs and the event feed's ref together, and answers each report with a verdict. Printed: the
driver's latency to a report (report sent -> driver holds it) and the trial's round trip (report sent ->
verdict back), median / p95 / max, and how many tasks the dashboard's task list holds afterwards (with the
dashboard on only: `--count-tasks`).
"""

from __future__ import annotations

import argparse
import logging
import random
import tempfile
import time
from typing import Any

import ray

from orchestrator.driver.dispatch.trial_channel import EventFeed, stage_hook
from orchestrator.records import StageMetrics
from orchestrator.trial_events import StageReport

METRICS = StageMetrics(1, 1, 1, 0, 1.0, 100.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, None)


@ray.remote(num_cpus=0)
def _stand_in_trial(channel: Any, number: int, steps: int) -> list[tuple[int, float, float]]:
    hook = stage_hook(channel, number)
    rnd = random.Random(number)
    out = []
    for step in range(steps):
        time.sleep(rnd.uniform(0.05, 0.3))  # a stage's length
        sent = time.time()
        hook(step, METRICS)
        out.append((step, sent, time.time()))
    return out


def _ms(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return 1000.0 * ordered[round(q * (len(ordered) - 1))]


def measure(trials: int, steps: int) -> dict[str, list[float]]:
    feed = EventFeed()
    refs = [_stand_in_trial.remote(feed.actor, n, steps) for n in range(trials)]
    inflight, seen = set(refs), {}
    try:
        while inflight:
            ready, _ = ray.wait([*inflight, feed.pending()], num_returns=1, timeout=1.0)
            for event in feed.take(ready):
                assert isinstance(event, StageReport)
                seen[(event.number, event.step)] = time.time()
                feed.decide(event.number, event.step, True)
            inflight -= set(ready)
    finally:
        feed.close()
    to_driver, round_trip = [], []
    for number, ref in enumerate(refs):
        for step, sent, back in ray.get(ref):
            to_driver.append(seen[(number, step)] - sent)
            round_trip.append(back - sent)
    return {"driver holds the report": to_driver, "trial holds the verdict": round_trip}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, default=2)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--count-tasks", action="store_true", help="start the dashboard and count its tasks")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="specsweep-latency-") as tmp:
        ray.init(
            num_cpus=2,
            include_dashboard=args.count_tasks,
            logging_level=logging.WARNING,
            log_to_driver=False,
            _temp_dir=tmp,
        )
        try:
            for what, values in measure(args.trials, args.steps).items():
                print(
                    f"{what}: median {_ms(values, 0.5):.1f} ms, p95 {_ms(values, 0.95):.1f} ms, "
                    f"max {max(values) * 1000:.1f} ms ({len(values)} reports)"
                )
            if args.count_tasks:
                from ray.util.state import list_tasks

                time.sleep(3)  # task events reach the dashboard in batches
                names = [t.name for t in list_tasks(limit=10_000, raise_on_missing_output=False)]
                print(f"dashboard tasks: {len(names)} ({', '.join(sorted(set(names)))})")
        finally:
            ray.shutdown()


if __name__ == "__main__":
    main()
