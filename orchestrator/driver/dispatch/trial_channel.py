"""The Ray actor that carries `trial_events` between running trials and the driver.

Everything travels through one async actor, `TrialChannel`, without polling. A trial's stage report is a
single call that waits on the actor for the verdict; the driver keeps one `next_events` call outstanding
and waits on its ref together with the trials' refs, so it wakes as soon as anything is reported. Every
call to a Ray actor is an actor task, and Ray records each one for the dashboard's task list unless the
method says `enable_task_events=False`; the channel's methods do, so the task list shows the trials (and
the channel's one creation task), not thousands of messages.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from collections.abc import Callable
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from orchestrator.records import StageMetrics
from orchestrator.trial_events import PhaseEvent, PhaseHook, StageReport, TrialEvent

log = logging.getLogger(__name__)
CHANNEL_NAME = "specsweep"
VERDICT_WAIT_S = 10.0  # a trial that hears nothing in this time measures on: the safe side
LONG_POLL_S = 5.0  # how long one `next_events` call waits on the actor before it answers empty


@ray.remote(num_cpus=0, max_restarts=0)
class TrialChannel:
    """Carries phase events and stage reports from trials to the driver, and prune verdicts back; its log
    is the sweep's node health board."""

    def __init__(self) -> None:
        self._events: list[TrialEvent] = []
        self._arrived = asyncio.Event()
        self._verdicts: dict[tuple[int, int], asyncio.Future[bool]] = {}
        self._health: list[str] = []
        # Its own handler: a Ray worker's root logger passes warnings only, and this is the actor's output.
        self._board = logging.getLogger("specsweep.nodes")
        if not self._board.handlers:
            handler = logging.StreamHandler(sys.stderr)  # the log tab the dashboard opens first
            handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
            self._board.addHandler(handler)
            self._board.setLevel(logging.INFO)
            self._board.propagate = False

    def _push(self, event: TrialEvent) -> None:
        self._events.append(event)
        self._arrived.set()

    @ray.method(enable_task_events=False)
    async def phase(self, event: PhaseEvent) -> None:
        self._push(event)

    @ray.method(enable_task_events=False)
    async def report_stage(self, report: StageReport, timeout_s: float) -> bool | None:
        """Queue the stage for the driver and wait for its verdict (None: none came in time)."""
        key = (report.number, report.step)
        verdict: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._verdicts[key] = verdict
        self._push(report)
        try:
            return await asyncio.wait_for(verdict, timeout_s)
        except TimeoutError:
            return None
        finally:
            self._verdicts.pop(key, None)

    @ray.method(enable_task_events=False)
    async def decide(self, number: int, step: int, keep_going: bool) -> None:
        verdict = self._verdicts.get((number, step))
        if verdict is not None and not verdict.done():
            verdict.set_result(keep_going)

    @ray.method(enable_task_events=False)
    async def node_health(self, lines: list[str]) -> None:
        """The driver's view of its nodes, printed to this actor's log when it changes: the dashboard
        shows an actor's log (Actors tab, this actor, Log) with no Prometheus behind it."""
        if lines != self._health:
            self._health = lines
            self._board.info("node health:\n  %s", "\n  ".join(lines))

    @ray.method(enable_task_events=False)
    async def next_events(self, timeout_s: float) -> list[TrialEvent]:
        """Everything reported since the last call; waits up to `timeout_s` for something to arrive."""
        if not self._events:
            try:
                await asyncio.wait_for(self._arrived.wait(), timeout_s)
            except TimeoutError:
                pass
        out, self._events = self._events, []
        self._arrived.clear()
        return out


class EventFeed:
    """The driver's end: one `next_events` call in flight, whose ref the driver waits on beside its
    trials' refs (`pending`), then `take` the events when that ref is among the ready ones."""

    def __init__(self) -> None:
        # On the driver's own node: a trial node that dies must not take the channel (and the sweep) with it.
        here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
        self.actor: Any = TrialChannel.options(  # type: ignore[attr-defined]
            name=CHANNEL_NAME, scheduling_strategy=here
        ).remote()
        self._pending: ray.ObjectRef | None = None

    def pending(self) -> ray.ObjectRef:
        if self._pending is None:
            self._pending = self.actor.next_events.remote(LONG_POLL_S)
        return self._pending

    def take(self, ready: list[Any]) -> list[TrialEvent]:
        if self._pending is None or self._pending not in ready:
            return []
        ref, self._pending = self._pending, None
        events: list[TrialEvent] = ray.get(ref)
        return events

    def decide(self, number: int, step: int, keep_going: bool) -> None:
        self.actor.decide.remote(number, step, keep_going)

    def node_health(self, lines: list[str]) -> None:
        self.actor.node_health.remote(lines)

    def close(self) -> None:
        ray.kill(self.actor)


def stage_hook(
    actor: Any, number: int, wait_s: float = VERDICT_WAIT_S
) -> Callable[[int, StageMetrics], bool]:
    """The trial's side of a stage report: one call, answered by the driver's verdict."""

    def on_stage(step: int, metrics: StageMetrics) -> bool:
        report = StageReport(number, step, metrics, time.time())
        try:
            verdict = ray.get(actor.report_stage.remote(report, wait_s), timeout=wait_s + 30.0)
        except (ray.exceptions.RayError, TimeoutError):  # the channel is gone: the trial is not
            log.warning("trial %d: no channel to the driver; measuring on", number, exc_info=True)
            return True
        return True if verdict is None else bool(verdict)  # no verdict in time: measure on

    return on_stage


def phase_hook(actor: Any) -> PhaseHook:
    """The trial's side of a phase change: sent without waiting; a lost event only dims the progress line."""

    def on_phase(event: PhaseEvent) -> None:
        try:
            actor.phase.remote(event)
        except Exception:
            log.debug("could not send a phase event", exc_info=True)

    return on_phase
