"""The feasibility map shows every outcome at a point: an OOM cross never hides trials that served there.

Seen in the demo-oom report: `cuda_graph_max_bs / max_running_requests` showed only red crosses at
(64, 16) and (512, 48) though seven trials had served at those values.
"""

from __future__ import annotations

from collections import Counter

from orchestrator.mlflow_schema import Metric
from orchestrator.report.data import Outcome, RunReadBack
from orchestrator.report.plots import FEASIBILITY_PAIRS, feasibility_figure

PANEL = FEASIBILITY_PAIRS.index(("cuda_graph_max_bs", "max_running_requests")) + 1


def run(number: int, status: str, fraction: float, graph_bs: int, running: int) -> RunReadBack:
    params: dict[str, float | str] = {
        "mem_fraction_static": fraction,
        "cuda_graph_max_bs": float(graph_bs),
        "max_running_requests": float(running),
        "speculative_num_steps": 3.0,
        "speculative_eagle_topk": 1.0,
        "speculative_num_draft_tokens": 4.0,
    }
    metrics = {Metric.OUTPUT_TOK_PER_S.value: 1000.0 + number} if status == "ok" else {}
    return RunReadBack(number, f"r{number}", status, f"run {number}", params, metrics)


ROWS = [
    run(0, "oom", 0.88, 64, 16),
    *(run(n, "ok", 0.87, 64, 16) for n in (1, 4, 5)),
    run(2, "oom", 0.72, 512, 48),
    *(run(n, "ok", 0.88, 512, 48) for n in (6, 7, 8, 9)),
]


def _axis(panel: int) -> str:
    return "x" if panel == 1 else f"x{panel}"


def test_each_outcome_at_a_shared_point_has_its_own_visible_marker() -> None:
    fig = feasibility_figure(ROWS)
    panel = [t for t in fig.data if t.xaxis == _axis(PANEL) and t.mode == "markers"]
    where: dict[str, set[tuple[float, float]]] = {}
    for trace in panel:
        where.setdefault(trace.legendgroup, set()).update(zip(trace.x, trace.y, strict=True))
    feasible, oom = where[Outcome.FEASIBLE.value], where[Outcome.OOM.value]
    assert feasible and oom
    assert not feasible & oom, "an OOM marker is drawn at the very point of a feasible one"
    # still beside their true values: both within a few per cent of the axis span of 64 .. 512
    for x, _ in feasible | oom:
        assert min(abs(x - 64), abs(x - 512)) < 0.06 * (512 - 64), x


def test_the_trials_at_a_point_are_counted_per_outcome() -> None:
    fig = feasibility_figure(ROWS)
    labels = [t for t in fig.data if t.xaxis == _axis(PANEL) and t.mode == "text"]
    counted: Counter[str] = Counter()
    for trace in labels:
        for text in trace.text:
            counted[trace.legendgroup] += int(text)
    # every feasible trial and the OOMs (one each: no label needed) are accounted for
    assert counted[Outcome.FEASIBLE.value] == 7
    assert fig.layout.legend.title.text and "counts" in fig.layout.legend.title.text


def test_feasible_markers_are_drawn_over_the_failures() -> None:
    fig = feasibility_figure(ROWS)
    order = [t.legendgroup for t in fig.data if t.xaxis == _axis(PANEL) and t.mode == "markers"]
    assert order[-1] == Outcome.FEASIBLE.value, order
