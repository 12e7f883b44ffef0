"""Node health: Ray metrics for the dashboard, hygiene quarantine, and where the next trial may go.

Metrics. Ray exports `ray.util.metrics` through each node's metrics agent with a `ray_` prefix (so
`specsweep_gpu_clean` is scraped as `ray_specsweep_gpu_clean`). A Ray 2.60 gauge is dropped by the agent
about two report intervals (20 s by default) after its last `set`, so a gauge recorded once (the best
tok/s, a node's running flag) would vanish from the panels while still true. Every process that records
a gauge therefore re-sets its last values every second from a daemon thread; when a trial's worker exits,
its series age out, which is the honest end of what it measured. Each series also carries Ray's own
`WorkerId` label: panels should aggregate, e.g. `max by (node_id, gpu) (ray_specsweep_gpu_memory_used_mib)`.
Outside Ray every `record_*` call is a no-op, and none of them ever raises: node health must never fail
a trial.

Quarantine. A node whose GPUs are not clean before a trial, twice in a row, has something on it that the
sweep does not own (a leaked server, another user). `NodeHealth` counts that per node and `pick_node`
leaves such nodes out when the driver chooses where the next trial runs.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import ray

from orchestrator.records import FailureKind, GpuSample, TrialResult, TrialStatus

log = logging.getLogger(__name__)

TRIAL_SLOT = "trial_slot"  # the same custom resource as `cluster.TRIAL_SLOT` (kept here to avoid a cycle)
REFRESH_S = 1.0  # well inside the agent's gauge TTL of 2 x max(metrics_report_interval_ms, 1 s)

GPU_MEMORY_USED = "specsweep_gpu_memory_used_mib"
GPU_CLEAN = "specsweep_gpu_clean"
TRIAL_STATUS = "specsweep_trial_status_total"
TRIAL_RUNNING = "specsweep_trial_running"
BEST_TOK_S = "specsweep_best_output_tok_per_s"

_Tags = tuple[tuple[str, str], ...]


class _Metrics:
    """The metric objects of this process, made on first use (a Ray metric is registered per process)."""

    def __init__(self) -> None:
        from ray.util.metrics import Counter, Gauge

        self.gauges: dict[str, Any] = {
            GPU_MEMORY_USED: Gauge(
                GPU_MEMORY_USED, "GPU memory in use as NVML reports it (MiB)", tag_keys=("node_id", "gpu")
            ),
            GPU_CLEAN: Gauge(
                GPU_CLEAN, "1 if every GPU of the node was clean at the last check, else 0", ("node_id",)
            ),
            TRIAL_RUNNING: Gauge(TRIAL_RUNNING, "1 while a trial runs on the node", ("node_id",)),
            BEST_TOK_S: Gauge(BEST_TOK_S, "Best output tok/s of the sweep so far"),
        }
        self.trial_status = Counter(TRIAL_STATUS, "Finished trials by status", tag_keys=("status",))


_lock = threading.Lock()
_metrics: _Metrics | None = None
_last: dict[tuple[str, _Tags], float] = {}  # what the refresher re-sets
_refresher: threading.Thread | None = None


def _ensure() -> _Metrics | None:
    global _metrics, _refresher
    if not ray.is_initialized():
        return None
    with _lock:
        if _metrics is None:
            _metrics = _Metrics()
        if _refresher is None:
            _refresher = threading.Thread(target=_refresh_forever, name="specsweep-metrics", daemon=True)
            _refresher.start()
        return _metrics


def _set(name: str, value: float, tags: dict[str, str] | None = None) -> None:
    metrics = _ensure()
    if metrics is None:
        return
    key = (name, tuple(sorted((tags or {}).items())))
    with _lock:
        _last[key] = value
    metrics.gauges[name].set(value, tags=tags)


def _refresh_forever() -> None:
    while True:
        time.sleep(REFRESH_S)
        refresh()


def refresh() -> None:
    """Re-set every gauge this process recorded, so that the agent keeps exporting it."""
    try:
        if _metrics is None or not ray.is_initialized():
            return
        with _lock:
            items = list(_last.items())
        for (name, tags), value in items:
            _metrics.gauges[name].set(value, tags=dict(tags) or None)
    except Exception:  # a metrics hiccup must never take a trial or the driver down
        log.debug("metrics refresh failed", exc_info=True)


def record_gpu_samples(node_id: str, samples: Sequence[GpuSample], clean: bool) -> None:
    """The node's GPU memory and clean flag; called in the trial before and after the server runs."""
    try:
        for s in samples:
            _set(GPU_MEMORY_USED, float(s.used_mib), {"node_id": node_id, "gpu": str(s.index)})
        _set(GPU_CLEAN, 1.0 if clean else 0.0, {"node_id": node_id})
    except Exception:
        log.debug("could not record GPU samples", exc_info=True)


def record_trial_finished(status: TrialStatus) -> None:
    try:
        metrics = _ensure()
        if metrics is not None:
            metrics.trial_status.inc(1.0, tags={"status": status.value})
    except Exception:
        log.debug("could not record a finished trial", exc_info=True)


def record_running(node_id: str, running: bool) -> None:
    try:
        _set(TRIAL_RUNNING, 1.0 if running else 0.0, {"node_id": node_id})
    except Exception:
        log.debug("could not record the running flag", exc_info=True)


def record_best(tok_s: float) -> None:
    try:
        _set(BEST_TOK_S, float(tok_s))
    except Exception:
        log.debug("could not record the best tok/s", exc_info=True)


# -- quarantine ------------------------------------------------------------------------------------


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
    the GPUs. Quarantine is sticky until `release`, since no trial runs there to prove it clean again.
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


# -- placement -------------------------------------------------------------------------------------


def pick_node(
    alive_nodes: list[dict[str, Any]], busy: set[str], quarantined: set[str], *, gpus: int = 0
) -> str | None:
    """A node for the next trial: alive, declaring a trial slot (and `gpus` GPUs), neither busy nor
    quarantined. `alive_nodes` is `ray.nodes()` as is; the lowest node id wins so the choice is
    reproducible. None when no node qualifies (the driver waits rather than queueing in Ray, where a
    task pinned to a node would sit invisible to it)."""
    candidates = []
    for node in alive_nodes:
        node_id = str(node.get("NodeID", ""))
        resources = node.get("Resources") or {}
        if (
            node_id
            and node.get("Alive")
            and resources.get(TRIAL_SLOT, 0) >= 1
            and resources.get("GPU", 0) >= gpus
            and node_id not in busy
            and node_id not in quarantined
        ):
            candidates.append(node_id)
    return min(candidates) if candidates else None


def pinned_to(node_id: str) -> dict[str, Any]:
    """`.options()` that run a task on exactly `node_id` (fails, not waits, if that node dies)."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return {"scheduling_strategy": NodeAffinitySchedulingStrategy(node_id, soft=False)}
