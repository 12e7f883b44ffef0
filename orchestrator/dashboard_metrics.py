"""Ray metrics for the dashboard and the Grafana panels in `dashboards/`: each node's GPU memory and
clean flag, which node runs a trial, finished trials by status, and the best tok/s so far.

Ray exports `ray.util.metrics` through each node's metrics agent with a `ray_` prefix (so
`specsweep_gpu_clean` is scraped as `ray_specsweep_gpu_clean`). A Ray 2.60 gauge is dropped by the agent
about two report intervals (20 s by default) after its last `set`, so a gauge recorded once (the best
tok/s, a node's running flag) would vanish from the panels while still true. Every process that records
a gauge therefore re-sets its last values every second from a daemon thread; when a trial's worker exits,
its series age out, which is the honest end of what it measured. Each series also carries Ray's own
`WorkerId` label: panels should aggregate, e.g. `max by (node_id, gpu) (ray_specsweep_gpu_memory_used_mib)`.
Outside Ray every `record_*` call is a no-op, and none of them ever raises: a metric must never fail
a trial. Ray is imported where a metric is recorded, and only in a process that has loaded it already
(a trial's task, a driver on Ray): the driver's loop records through this module (`NodeMetrics`,
`BestSoFar`), and on an in-process executor (the tests, the search benchmark) it loads no Ray for it.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

from orchestrator.records import GpuSample, TrialStatus

log = logging.getLogger(__name__)

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


def _ray_running() -> bool:
    """Whether this process is connected to Ray; a process that never imported Ray is not, and Ray is not
    loaded to find that out."""
    ray = sys.modules.get("ray")
    return ray is not None and bool(ray.is_initialized())


def _ensure() -> _Metrics | None:
    global _metrics, _refresher
    if not _ray_running():
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
        if _metrics is None or not _ray_running():
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
