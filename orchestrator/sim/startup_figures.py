"""The start-up figures the simulated server reports: KV and graph memory, and start-up timings.

Read off the start-up plan (``memory.plan_startup``) in the shapes SGLang's ``/get_server_info`` gives
them; the timings are also printed in the ``Engine startup timings`` log line.
"""

from __future__ import annotations

from typing import Any

from orchestrator.sim.memory import StartupPlan, StepKind
from orchestrator.sim.profile import SimProfile

# The capture names of the log, as /get_server_info spells them.
GRAPH_KEYS = {
    "target prefill": "prefill",
    "target decode": "decode",
    "target verify": "target_verify",
    "draft prefill": "draft_prefill",
    "draft decode": "draft_decode",
    "draft extend": "draft_extend",
}


def kv_target_gib(plan: StartupPlan) -> float:
    kv = [s for s in plan.steps if s.kind is StepKind.KV and s.role == "target"]
    return kv[0].kv_k + kv[0].kv_v if kv else 0.0


def graph_usage(plan: StartupPlan, speculative: bool) -> dict[str, float]:
    usage = {"prefill": 0.0, "decode": 0.0}
    if speculative:
        usage.update(target_verify=0.0, draft_prefill=0.0, draft_decode=0.0, draft_extend=0.0)
    for s in plan.steps:
        if s.kind is StepKind.GRAPH:
            usage[GRAPH_KEYS.get(s.name, s.name.replace(" ", "_"))] = s.usage
    return usage


def _graph_times(plan: StartupPlan, speculative: bool) -> dict[str, float]:
    times = dict.fromkeys(graph_usage(plan, speculative), 0.0)
    for s in plan.steps:
        if s.kind is StepKind.GRAPH:
            times[GRAPH_KEYS.get(s.name, s.name.replace(" ", "_"))] = s.real_s
    return times


def startup_times(plan: StartupPlan, profile: SimProfile, speculative: bool) -> dict[str, Any]:
    kv = sum(s.real_s for s in plan.steps if s.kind is StepKind.KV)
    graphs = _graph_times(plan, speculative)
    weights = sum(s.real_s for s in plan.steps if s.kind is StepKind.WEIGHTS)
    scheduler_e2e = profile.import_s / 2 + weights + kv + sum(graphs.values())
    return {
        "load_weight": profile.weight_load_s,
        "kv_cache_allocation": kv,
        "scheduler_e2e": scheduler_e2e,
        "cuda_graph": graphs,
        "tokenizer_e2e": scheduler_e2e + profile.import_s / 2,
    }
