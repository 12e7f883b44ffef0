"""Benchmark client: synthetic workloads, a streaming /generate client and bench_serving's metrics."""

from orchestrator.bench.client import RequestOutcome, StageTimeout, new_session, run_stage
from orchestrator.bench.control import flush_cache, server_accept_length, server_info, wait_healthy
from orchestrator.bench.metrics import percentile, percentiles, stage_metrics
from orchestrator.bench.workload import RequestSpec, synthetic_requests

__all__ = [
    "RequestOutcome",
    "RequestSpec",
    "StageTimeout",
    "flush_cache",
    "new_session",
    "percentile",
    "percentiles",
    "run_stage",
    "server_accept_length",
    "server_info",
    "stage_metrics",
    "synthetic_requests",
    "wait_healthy",
]
