"""Ray's metrics agent as the dashboard's sink (`dashboard_metrics.MetricsSink`), installed where Ray runs.

`dashboard_metrics` records without knowing Ray; this is the one place that turns its records into
`ray.util.metrics` gauges and counters. `record_to_ray` installs it in a process on Ray: the trial's task
(`cluster._trial_task`, before the trial runs) and the driver (`cluster.RayExecutor.open`), so that the
node and the driver's observers reach the dashboard, and a process that runs trials in process never does.
"""

from __future__ import annotations

import threading
from typing import Any

import ray
from ray.util.metrics import Counter, Gauge

from orchestrator import dashboard_metrics


class RayMetrics:
    """This process's Ray metrics, made on first use: a Ray metric is registered once per process, and only
    in a process connected to Ray."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._gauges: dict[str, Any] = {}
        self._counters: dict[str, Any] = {}

    def live(self) -> bool:
        return bool(ray.is_initialized())

    def _made(self) -> None:
        with self._lock:
            if self._gauges:
                return
            counters, gauges = dashboard_metrics.COUNTERS.items(), dashboard_metrics.GAUGES.items()
            self._counters = {name: Counter(name, words, tag_keys=tags) for name, (words, tags) in counters}
            self._gauges = {name: Gauge(name, words, tag_keys=tags) for name, (words, tags) in gauges}

    def set_gauge(self, name: str, value: float, tags: dict[str, str] | None) -> None:
        self._made()
        self._gauges[name].set(value, tags=tags)

    def count(self, name: str, value: float, tags: dict[str, str]) -> None:
        self._made()
        self._counters[name].inc(value, tags=tags)


def record_to_ray() -> None:
    """Send this process's dashboard metrics to Ray's agent (a second call changes nothing)."""
    dashboard_metrics.install(RayMetrics())
