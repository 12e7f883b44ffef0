"""The seam between the driver's decisions and where trials run.

`Sweep` decides what to launch, where, whether to prune, and what a result means; an `Executor` only runs
trials and carries their reports. `cluster.RayExecutor` runs them as Ray tasks, one per whole node; a test
or a benchmark can run the same `Sweep` on an in-process executor (no Ray, no wall clock), built on
`OneNodeExecutor`.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any, Protocol

from orchestrator.driver.dispatch.placement import TRIAL_SLOT
from orchestrator.errors import TrialError, TrialLost
from orchestrator.records import TrialResult
from orchestrator.trial_events import TrialEvent, TrialRequest

# How a trial ends without a result, as `Executor.result` raises it (`orchestrator.errors`).
__all__ = ["Executor", "Handle", "OneNodeExecutor", "TrialError", "TrialLost"]

Handle = Hashable  # what `submit` returns: the executor's name for one running trial


class Executor(Protocol):
    """Runs trials for the driver. Every method is called from the driver's one thread."""

    def open(self) -> None:
        """Before the first submit of a `Sweep.run` (opens the event channel)."""

    def trial_slots(self) -> int:
        """How many trials may run at once."""

    def alive_nodes(self) -> list[dict[str, Any]]:
        """Nodes that can take a trial, as `ray.nodes()` describes them (`NodeID`, `Alive`, `Resources`)."""

    def submit(self, request: TrialRequest, node_id: str) -> Handle:
        """Start `request` on `node_id`; its phases and stages arrive through `wait`."""

    def wait(self, handles: Sequence[Handle], timeout_s: float) -> tuple[list[Handle], list[TrialEvent]]:
        """Block until a trial finishes or an event arrives (or `timeout_s`): the finished handles, and the
        phase events and stage reports that arrived. A stage report waits for `decide`."""

    def result(self, handle: Handle) -> TrialResult:
        """The finished trial's result; raises `TrialLost` when it has none (the node died), and
        `TrialError`, carrying its stage and the node's own words, when the trial's code raised."""

    def decide(self, number: int, step: int, keep_going: bool) -> None:
        """The driver's verdict on trial `number`'s stage `step`: measure on, or stop (pruned)."""

    def node_health(self, lines: list[str]) -> None:
        """The driver's view of its nodes, for whoever watches the executor."""

    def cancel(self, handle: Handle) -> None:
        """Stop a running trial (the driver is stopping)."""

    def close(self) -> None:
        """After a `Sweep.run`: release what `open` took."""


class OneNodeExecutor:
    """What every in-process `Executor` on one node with one trial slot does alike: a subclass runs trials
    in the driver's own process (`submit`, `wait`, `result`), so there is no event channel to open or
    close, no node health to show and nothing to cancel, and a trial that is not stage by stage has no
    verdict to hear. The tests and the search benchmark build theirs on it."""

    def __init__(self, node_id: str, gpus: float) -> None:
        self.node_id = node_id
        self.gpus = gpus

    def open(self) -> None:
        pass

    def trial_slots(self) -> int:
        return 1

    def alive_nodes(self) -> list[dict[str, Any]]:
        return [{"NodeID": self.node_id, "Alive": True, "Resources": {TRIAL_SLOT: 1.0, "GPU": self.gpus}}]

    def decide(self, number: int, step: int, keep_going: bool) -> None:
        pass

    def node_health(self, lines: list[str]) -> None:
        pass

    def cancel(self, handle: Handle) -> None:
        pass

    def close(self) -> None:
        pass
