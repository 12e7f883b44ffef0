"""A trial under load: is the KV pool big enough to serve (the probe), and what a failure under load was.

Both are read off the server's log (``LogReport``) as it stands when asked, so the caller passes a
function that re-reads it.
"""

from __future__ import annotations

from collections.abc import Callable

import aiohttp

from orchestrator.bench.client import run_stage
from orchestrator.bench.workload import synthetic_requests
from orchestrator.engines.api import ServerApi
from orchestrator.engines.logrecords import LogReport, ResolvedArgs
from orchestrator.records import Failure, FailureKind, FailureStage, ServerConfig, TrialStatus
from orchestrator.spec.sweep_spec import SweepSpec


async def kv_probe(
    url: str,
    session: aiohttp.ClientSession,
    spec: SweepSpec,
    config: ServerConfig,
    read_log: Callable[[], LogReport[ResolvedArgs]],
    on_probe: Callable[[], None],
    api: ServerApi,
) -> tuple[Failure | None, str]:
    """Can the configuration serve its own max_running_requests? A too-small KV pool does not crash
    SGLang: it retracts requests again and again and re-prefills them, and throughput falls off a
    cliff. Probe at full concurrency with the workload's lengths when the pool looks short.

    Returns the KV-pressure failure (None when the pool holds) and a note for the record ('' when no
    probe was needed)."""
    wl = spec.workload
    report = read_log()
    kv_tokens = report.memory.max_total_num_tokens or report.memory.kv_cache_tokens
    mrr = config.max_running_requests
    if report.args is not None and report.args.effective_max_running_requests:
        mrr = report.args.effective_max_running_requests
    demand = mrr * (wl.input_len + wl.output_len)
    if not kv_tokens or kv_tokens >= demand:
        return None, ""
    on_probe()
    probe = synthetic_requests(mrr, wl.input_len, wl.output_len, wl.vocab_size, wl.seed + 11)
    outcomes, _ = await run_stage(
        url, probe, mrr, api=api, timeout_s=spec.timeouts.benchmark_s, session=session
    )
    retracted = max(sum(o.num_retractions for o in outcomes), read_log().retractions)
    note = f"KV probe: {kv_tokens} KV tokens for {demand} asked, {retracted} retraction(s)"
    if retracted == 0:
        return None, note
    return Failure(
        FailureStage.UNDER_LOAD,
        FailureKind.KV_PRESSURE,
        f"kv_pressure: {retracted} request(s) retracted at {mrr} concurrent requests; the KV pool holds "
        f"{kv_tokens} tokens, {demand} were asked for ({mrr} x {wl.input_len}+{wl.output_len}). "
        "Lower max_running_requests or give the KV pool more memory.",
        detail=f"retractions={retracted} kv_tokens={kv_tokens} demand={demand}",
    ), note


def under_load_failure(
    report: LogReport[ResolvedArgs], server_exited: bool, why: str
) -> tuple[TrialStatus, Failure]:
    """What went wrong once the server was serving: an OOM, what the log says, or the benchmark's words."""
    if report.runtime_oom or (report.failure is not None and report.failure.is_oom):
        failure = report.failure or Failure(FailureStage.UNDER_LOAD, FailureKind.OOM, why)
        return TrialStatus.OOM_UNDER_LOAD, failure
    if report.failure is not None:
        return TrialStatus.FAILED, report.failure
    kind = FailureKind.CRASH if server_exited else FailureKind.BENCHMARK_ERROR
    return TrialStatus.FAILED, Failure(FailureStage.UNDER_LOAD, kind, why or "every request failed")
