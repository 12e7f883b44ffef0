"""Ray metrics for the dashboard and the Grafana panels in `dashboards/`: each node's GPU memory and
clean flag, which node runs a trial, finished trials by status, and the best tok/s so far.

Ray exports `ray.util.metrics` through each node's metrics agent with a `ray_` prefix (so
`specsweep_gpu_clean` is scraped as `ray_specsweep_gpu_clean`). A Ray 2.60 gauge is dropped by the agent
about two report intervals (20 s by default) after its last `set`, so a gauge recorded once (the best
tok/s, a node's running flag) would vanish from the panels while still true. Every process that records
a gauge therefore re-sets its last values every second from a daemon thread; when a trial's worker exits,
its series age out, which is the honest end of what it measured. Each series also carries Ray's own
`WorkerId` label: panels should aggregate, e.g. `max by (node_id, gpu) (ray_specsweep_gpu_memory_used_mib)`.
This module knows no Ray: it records into the `MetricsSink` its process was given (`install`), and
without one every `record_*` call is a no-op; none of them ever raises, since a metric must never fail a
trial. Ray's sink stands where Ray does, in `driver/dispatch/` (`driver.dispatch.ray_metrics`), which
installs it in a trial's task and in a driver on Ray: the node (`node.trial`) and the driver's observers
record through this module, and on an in-process executor (the tests, the search benchmark) nothing is
installed and no Ray is loaded for it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from typing import Protocol

from orchestrator.records import GpuSample, TrialStatus

log = logging.getLogger(__name__)

REFRESH_S = 1.0  # well inside the agent's gauge TTL of 2 x max(metrics_report_interval_ms, 1 s)

GPU_MEMORY_USED = "specsweep_gpu_memory_used_mib"
GPU_CLEAN = "specsweep_gpu_clean"
TRIAL_STATUS = "specsweep_trial_status_total"
TRIAL_RUNNING = "specsweep_trial_running"
BEST_TOK_S = "specsweep_best_output_tok_per_s"

# Each metric's description and tag keys, as the sink registers it.
GAUGES: dict[str, tuple[str, tuple[str, ...]]] = {
    GPU_MEMORY_USED: ("GPU memory in use as NVML reports it (MiB)", ("node_id", "gpu")),
    GPU_CLEAN: ("1 if every GPU of the node was clean at the last check, else 0", ("node_id",)),
    TRIAL_RUNNING: ("1 while a trial runs on the node", ("node_id",)),
    BEST_TOK_S: ("Best output tok/s of the sweep so far", ()),
}
COUNTERS: dict[str, tuple[str, tuple[str, ...]]] = {
    TRIAL_STATUS: ("Finished trials by status", ("status",)),
}

_Tags = tuple[tuple[str, str], ...]


class MetricsSink(Protocol):
    """Where this process's metrics go (Ray's: `driver.dispatch.ray_metrics.RayMetrics`)."""

    def live(self) -> bool:
        """Whether a record would reach anyone now (Ray's: the process is still connected)."""

    def set_gauge(self, name: str, value: float, tags: dict[str, str] | None) -> None: ...

    def count(self, name: str, value: float, tags: dict[str, str]) -> None: ...


_lock = threading.Lock()
_sink: MetricsSink | None = None
_last: dict[tuple[str, _Tags], float] = {}  # what the refresher re-sets
_refresher: threading.Thread | None = None


def install(sink: MetricsSink) -> None:
    """Send this process's metrics to ``sink`` from now on (a process has one; the first one stays)."""
    global _sink
    with _lock:
        if _sink is None:
            _sink = sink


def _ensure() -> MetricsSink | None:
    global _refresher
    sink = _sink
    if sink is None or not sink.live():
        return None
    with _lock:
        if _refresher is None:
            _refresher = threading.Thread(target=_refresh_forever, name="specsweep-metrics", daemon=True)
            _refresher.start()
    return sink


def _set(name: str, value: float, tags: dict[str, str] | None = None) -> None:
    sink = _ensure()
    if sink is None:
        return
    key = (name, tuple(sorted((tags or {}).items())))
    with _lock:
        _last[key] = value
    sink.set_gauge(name, value, tags)


def _refresh_forever() -> None:
    while True:
        time.sleep(REFRESH_S)
        refresh()


def refresh() -> None:
    """Re-set every gauge this process recorded, so that the agent keeps exporting it."""
    try:
        sink = _sink
        if sink is None or not sink.live():
            return
        with _lock:
            items = list(_last.items())
        for (name, tags), value in items:
            sink.set_gauge(name, value, dict(tags) or None)
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
        sink = _ensure()
        if sink is not None:
            sink.count(TRIAL_STATUS, 1.0, {"status": status.value})
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
