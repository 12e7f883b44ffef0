"""The Grafana dashboards: valid JSON, every panel queries Prometheus for a metric the servers or the
orchestrator really export, and the template variables the queries use exist."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

DASHBOARDS = Path(__file__).resolve().parent.parent / "dashboards"
SGLANG_METRICS = {
    "sglang:gen_throughput",
    "sglang:spec_accept_length",
    "sglang:spec_accept_rate",
    "sglang:token_usage",
    "sglang:num_running_reqs",
    "sglang:num_queue_reqs",
}
# Ray exports application metrics with a `ray_` prefix.
NODE_METRICS = {
    "ray_specsweep_gpu_memory_used_mib",
    "ray_specsweep_gpu_clean",
    "ray_specsweep_trial_status_total",
    "ray_specsweep_trial_running",
    "ray_specsweep_best_output_tok_per_s",
}
CASES = {"sglang.json": (SGLANG_METRICS, "instance"), "specsweep_nodes.json": (NODE_METRICS, "node_id")}
METRIC_NAME = re.compile(r"\b(?:sglang:|ray_)[A-Za-z0-9_:]+")


def load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((DASHBOARDS / name).read_text())
    return data


def panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for p in dashboard["panels"]:
        out.append(p)
        out.extend(p.get("panels", []))  # panels folded inside a collapsed row
    return [p for p in out if p.get("type") != "row"]


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_panel_queries_a_known_metric_through_a_prometheus_datasource(name: str) -> None:
    known, _ = CASES[name]
    board = load(name)
    assert board["panels"], "no panels"
    used: set[str] = set()
    for panel in panels(board):
        title = panel.get("title", panel.get("id"))
        assert panel.get("datasource", {}).get("type") == "prometheus", f"{title}: no Prometheus datasource"
        assert panel.get("targets"), f"{title}: no query"
        for target in panel["targets"]:
            expr = target.get("expr", "")
            names = set(METRIC_NAME.findall(expr))
            assert names, f"{title}: query {expr!r} uses no metric"
            assert names <= known, f"{title}: unknown metric(s) {names - known}"
            assert target.get("datasource", panel["datasource"])["type"] == "prometheus"
            used |= names
    assert used == known, f"metrics with no panel: {known - used}"


@pytest.mark.parametrize("name", sorted(CASES))
def test_template_variables_are_defined_and_used(name: str) -> None:
    _, var = CASES[name]
    board = load(name)
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert (
        variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    )
    assert variables[var]["type"] == "query" and variables[var]["includeAll"]
    exprs = [t["expr"] for p in panels(board) for t in p["targets"]]
    # every selector on the variable's label filters by it; and the datasource uid is the variable
    assert any(f"${var}" in e for e in exprs)
    for p in panels(board):
        assert p["datasource"]["uid"] == "${datasource}"
    referenced = {m for e in exprs for m in re.findall(r"\$(\w+)", e)} - {
        "__range",
        "__interval",
        "__rate_interval",
    }
    assert referenced <= set(variables), f"undefined variables {referenced - set(variables)}"


def test_dashboards_have_distinct_uids_and_panel_ids() -> None:
    uids = [load(n)["uid"] for n in CASES]
    assert len(set(uids)) == len(uids)
    for name in CASES:
        ids = [p["id"] for p in panels(load(name))]
        assert len(set(ids)) == len(ids), f"{name}: duplicate panel ids"
