"""GPU hygiene quarantine: a node whose GPUs are not clean before a trial, twice in a row, has something on
it that the sweep does not own (a leaked server, another user). `NodeHealth` counts that per node, and
the driver leaves its `quarantined_nodes` out when it picks where the next trial runs
(`placement.pick_node`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from orchestrator.records import FailureKind, GpuSample, TrialResult

log = logging.getLogger(__name__)


@dataclass
class _NodeState:
    consecutive: int = 0
    total: int = 0
    last_message: str = ""
    quarantined: bool = False


def is_hygiene_failure(result: TrialResult) -> bool:
    return result.failure is not None and result.failure.kind is FailureKind.GPU_NOT_CLEAN


class NodeHealth:
    """Counts GPU hygiene failures per node (driver side) and says which nodes to keep out of rotation.

    A node is quarantined after `max_failures` consecutive trials found its GPUs not clean before start.
    Only a result that shows the pre-trial check passed (GPU samples and no hygiene failure) resets the
    count: a trial that failed before the check (missing model path) or a lost trial says nothing about
    the GPUs. Quarantine lasts for the rest of the sweep, since no trial runs there to prove it clean again.
    """

    def __init__(self, max_failures: int = 2) -> None:
        if max_failures < 1:
            raise ValueError("max_failures must be at least 1")
        self.max_failures = max_failures
        self._nodes: dict[str, _NodeState] = {}
        self._gpus: dict[str, tuple[GpuSample, ...]] = {}  # each node's last NVML reading

    def observe(self, result: TrialResult) -> bool:
        """Account for one finished trial; True when this result puts its node in quarantine."""
        if not result.node_id:
            return False
        state = self._nodes.setdefault(result.node_id, _NodeState())
        if result.gpu_after or result.gpu_before:
            self._gpus[result.node_id] = result.gpu_after or result.gpu_before
        if is_hygiene_failure(result):
            assert result.failure is not None
            state.consecutive += 1
            state.total += 1
            state.last_message = result.failure.message
            if not state.quarantined and state.consecutive >= self.max_failures:
                state.quarantined = True
                log.error(
                    "node %s quarantined: GPUs not clean before %d trials in a row (%s)",
                    result.node_id,
                    state.consecutive,
                    state.last_message,
                )
                return True
        elif result.gpu_before:
            state.consecutive = 0
        return False

    def quarantined(self, node_id: str) -> bool:
        state = self._nodes.get(node_id)
        return state is not None and state.quarantined

    @property
    def quarantined_nodes(self) -> frozenset[str]:
        return frozenset(n for n, s in self._nodes.items() if s.quarantined)

    def board(self) -> list[str]:
        """One line per node a trial ran on: in rotation or quarantined, and the GPU memory in use at its
        last reading (after its last trial). What the dashboard shows without Prometheus."""
        lines = []
        for node_id in sorted(self._nodes, key=lambda n: (not self._nodes[n].quarantined, n)):
            s = self._nodes[node_id]
            what = f"QUARANTINED ({s.last_message})" if s.quarantined else "in rotation"
            gpus = self._gpus.get(node_id, ())
            memory = " ".join(f"{g.index}:{g.used_mib:.0f}/{g.total_mib:.0f}" for g in gpus) or "no reading"
            lines.append(f"node {node_id}: {what}; GPU memory used/total MiB {memory}")
        return lines

    def report(self) -> list[str]:
        """One line per node that ever failed a hygiene check, quarantined nodes first."""
        lines = []
        for node_id, s in sorted(self._nodes.items(), key=lambda kv: (not kv[1].quarantined, kv[0])):
            if s.total == 0:
                continue
            what = "quarantined" if s.quarantined else "in rotation"
            lines.append(
                f"node {node_id}: {what}, {s.total} GPU hygiene failure(s), {s.consecutive} in a row"
                f" (last: {s.last_message})"
            )
        return lines
