"""The report's figures (plotly), one function per plot, each from the trial rows alone."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from orchestrator.records import TrialRecord, TrialStatus
from orchestrator.report import overlap
from orchestrator.report.answer import answer_so_far
from orchestrator.report.axes import integer_ticks, single_fraction_range
from orchestrator.report.data import Outcome, RunReadBack, pareto_front

LABELS = {
    "mem_fraction_static": "mem_fraction_static",
    "cuda_graph_max_bs": "cuda_graph_max_bs",
    "max_running_requests": "max_running_requests",
    "speculative_num_steps": "speculative steps",
    "speculative_eagle_topk": "top-k",
    "speculative_num_draft_tokens": "draft tokens",
    "itl_p99_ms": "p99 ITL (ms)",
    "ttft_p99_ms": "p99 TTFT (ms)",
}
# The pairs whose product decides memory (graph memory grows with batch size x draft tokens; the KV
# pool with the static fraction), and the speculative tree's shape last.
FEASIBILITY_PAIRS = (
    ("mem_fraction_static", "cuda_graph_max_bs"),
    ("mem_fraction_static", "max_running_requests"),
    ("cuda_graph_max_bs", "max_running_requests"),
    ("mem_fraction_static", "speculative_num_draft_tokens"),
    ("cuda_graph_max_bs", "speculative_num_draft_tokens"),
    ("speculative_num_steps", "speculative_eagle_topk"),
)
STYLE: dict[Outcome, dict[str, str]] = {
    Outcome.FEASIBLE: {"symbol": "circle", "color": "", "name": "feasible (colour: tok/s)"},
    Outcome.OOM: {"symbol": "x", "color": "#d62728", "name": "OOM (start-up, under load, KV pressure)"},
    Outcome.PREDICTED_OOM: {"symbol": "diamond-open", "color": "#ff7f0e", "name": "predicted OOM (skipped)"},
    Outcome.SLA_MISSED: {
        "symbol": "triangle-down-open",
        "color": "#9467bd",
        "name": "ran, missed the latency SLA",
    },
    Outcome.FAILED: {"symbol": "square-open", "color": "#7f7f7f", "name": "failed / timeout / lost"},
    Outcome.INTERRUPTED: {
        "symbol": "circle-open-dot",
        "color": "#17becf",
        "name": "interrupted (the driver stopped; queued again)",
    },
}
TEMPLATE = "plotly_white"


def _fmt(value: float | None, spec: str = ".1f") -> str:
    return format(value, spec) if value is not None else "-"


def hover(row: RunReadBack) -> str:
    lines = [f"trial {row.number}: {row.status}{' (baseline)' if row.baseline else ''}", row.config]
    if row.tok_s is not None:
        lines.append(f"{row.tok_s:.1f} tok/s, accept {_fmt(row.accept_length, '.2f')}")
    if row.failure_stage:
        lines.append(f"{row.failure_stage}/{row.failure_kind}")
    return "<br>".join(lines)


def _empty(fig: go.Figure, text: str) -> go.Figure:
    fig.add_annotation(text=text, showarrow=False, xref="paper", yref="paper", x=0.5, y=0.5)
    return fig


def _ok(rows: Sequence[RunReadBack]) -> list[RunReadBack]:
    return [r for r in rows if r.status == TrialStatus.OK.value and r.tok_s is not None]


def feasibility_figure(rows: Sequence[RunReadBack]) -> go.Figure:
    titles = [f"{LABELS[x]} / {LABELS[y]}" for x, y in FEASIBILITY_PAIRS]
    fig = make_subplots(rows=2, cols=3, subplot_titles=titles, horizontal_spacing=0.07, vertical_spacing=0.16)
    shown: set[Outcome] = set()
    for i, (x, y) in enumerate(FEASIBILITY_PAIRS):
        row_i, col_i = divmod(i, 3)
        cell = {"row": row_i + 1, "col": col_i + 1}
        panel = [r for r in rows if r.value(x) is not None and r.value(y) is not None]
        points = [(r.value(x) or 0.0, r.value(y) or 0.0, r.outcome) for r in panel]
        drawn = dict(
            zip(
                (r.number for r in panel),
                overlap.spread(points, overlap.step([p[0] for p in points])),
                strict=True,
            )
        )
        # The failures first, the feasible trials last: drawn over anything that is left touching them.
        for outcome in [*list(Outcome)[1:], Outcome.FEASIBLE]:
            pts = [r for r in panel if r.outcome is outcome]
            if not pts:
                continue
            style = STYLE[outcome]
            marker: dict[str, object] = {"symbol": style["symbol"], "size": 10, "line": {"width": 1}}
            if outcome is Outcome.FEASIBLE:
                marker.update(color=[r.tok_s or 0.0 for r in pts], coloraxis="coloraxis")
            else:
                marker.update(color=style["color"], line={"width": 2, "color": style["color"]})
            fig.add_trace(
                go.Scatter(
                    x=[drawn[r.number] for r in pts],
                    y=[r.value(y) for r in pts],
                    mode="markers",
                    marker=marker,
                    name=style["name"],
                    legendgroup=outcome.value,
                    showlegend=outcome not in shown,
                    text=[hover(r) for r in pts],
                    hovertemplate="%{text}<extra></extra>",
                ),
                **cell,
            )
            shown.add(outcome)
        _count_labels(fig, overlap.counts(points, [drawn[r.number] for r in panel]), cell)
        xs = [p[0] for p in points]
        ys = [p[1] for p in points]
        fig.update_xaxes(title_text=LABELS[x], **cell, **integer_ticks(rows, x), **single_fraction_range(xs))
        fig.update_yaxes(title_text=LABELS[y], **cell, **integer_ticks(rows, y), **single_fraction_range(ys))
    fig.update_layout(
        template=TEMPLATE,
        height=760,
        coloraxis={"colorscale": "Viridis", "colorbar": {"title": {"text": "tok/s"}}},
        legend={
            "orientation": "h",
            "y": -0.12,
            "title": {"text": overlap.LEGEND_TITLE, "side": "top"},
        },
        margin={"t": 40},
    )
    return fig if rows else _empty(fig, "no trial recorded")


def _count_labels(
    fig: go.Figure, counted: Sequence[tuple[float, float, Outcome, int]], cell: dict[str, int]
) -> None:
    """The number of trials of each outcome at a point, over its marker, where there is more than one."""
    for outcome in Outcome:
        sel = [c for c in counted if c[2] is outcome]
        if sel:
            fig.add_trace(
                go.Scatter(
                    x=[c[0] for c in sel],
                    y=[c[1] for c in sel],
                    mode="text",
                    text=[str(c[3]) for c in sel],
                    textposition="top center",
                    textfont={"size": 13, "color": STYLE[outcome]["color"] or "#333333"},
                    legendgroup=outcome.value,
                    showlegend=False,
                    hoverinfo="skip",
                ),
                **cell,
            )


def latency_figure(rows: Sequence[RunReadBack]) -> go.Figure:
    metrics = ("itl_p99_ms", "ttft_p99_ms")
    fig = make_subplots(
        rows=1,
        cols=2,
        shared_yaxes=True,
        subplot_titles=[f"output tok/s against {LABELS[m]}" for m in metrics],
        horizontal_spacing=0.06,
    )
    for col, metric in enumerate(metrics, start=1):
        pts = [r for r in _ok(rows) if r.metrics.get(metric) is not None]
        xy = [(r.metrics[metric], r.tok_s or 0.0) for r in pts]
        fig.add_trace(
            go.Scatter(
                x=[p[0] for p in xy],
                y=[p[1] for p in xy],
                mode="markers",
                marker={
                    "size": 9,
                    "color": "#1f77b4",
                    "symbol": ["star" if r.baseline else "circle" for r in pts],
                },
                name="ok trials (star: baseline)",
                legendgroup="trials",
                showlegend=col == 1,
                text=[hover(r) for r in pts],
                hovertemplate="%{text}<br>%{x:.1f} ms<extra></extra>",
            ),
            row=1,
            col=col,
        )
        front = pareto_front(xy)
        fig.add_trace(
            go.Scatter(
                x=[xy[i][0] for i in front],
                y=[xy[i][1] for i in front],
                mode="lines+markers",
                line={"shape": "hv", "color": "#d62728", "width": 2},
                marker={"size": 11, "symbol": "circle-open", "color": "#d62728", "line": {"width": 2}},
                name="Pareto front",
                legendgroup="front",
                showlegend=col == 1,
                text=[hover(pts[i]) for i in front],
                hovertemplate="%{text}<extra>Pareto</extra>",
            ),
            row=1,
            col=col,
        )
        fig.update_xaxes(title_text=LABELS[metric], row=1, col=col)
    fig.update_yaxes(title_text="output tok/s", row=1, col=1)
    fig.update_layout(template=TEMPLATE, height=460, margin={"t": 40}, legend={"orientation": "h", "y": -0.2})
    return fig if _ok(rows) else _empty(fig, "no trial completed a benchmark")


_ACCEPTANCE_AXES = ("speculative_num_steps", "speculative_eagle_topk")


def _acceptance_panel(
    fig: go.Figure, pts: Sequence[RunReadBack], group_by: str, label: str, marker: dict[str, Any], *, col: int
) -> None:
    """One panel of the acceptance figure: acceptance length against the other speculative value, one
    trace (and one entry of the panel's own legend) per value of `group_by`."""
    x_name = next(name for name in _ACCEPTANCE_AXES if name != group_by)
    for value in sorted({r.value(group_by) or 0.0 for r in pts}):
        sel = [r for r in pts if r.value(group_by) == value]
        fig.add_trace(
            go.Scatter(
                x=[r.value(x_name) for r in sel],
                y=[r.accept_length for r in sel],
                mode="markers",
                marker=marker,
                name=f"{label} {value:g}",
                legend="legend" if col == 1 else f"legend{col}",
                text=[hover(r) for r in sel],
                hovertemplate="%{text}<extra></extra>",
            ),
            row=1,
            col=col,
        )


def acceptance_figure(rows: Sequence[RunReadBack]) -> go.Figure:
    pts = [
        r
        for r in rows
        if r.accept_length is not None
        and r.value("speculative_num_steps") is not None
        and r.value("speculative_eagle_topk") is not None
    ]
    fig = make_subplots(
        rows=1,
        cols=2,
        shared_yaxes=True,
        subplot_titles=["acceptance length against speculative steps", "acceptance length against top-k"],
        horizontal_spacing=0.12,
    )
    steps = sorted({r.value("speculative_num_steps") or 0.0 for r in pts})
    # Each panel has its own legend: the left groups by top-k, the right by steps.
    _acceptance_panel(fig, pts, "speculative_eagle_topk", "top-k", {"size": 10}, col=1)
    if steps:
        fig.add_trace(
            go.Scatter(
                x=steps,
                y=[s + 1 for s in steps],
                mode="lines",
                line={"dash": "dot", "color": "#7f7f7f"},
                name="ceiling: steps + 1",
                legend="legend",
                hoverinfo="skip",
            ),
            row=1,
            col=1,
        )
    _acceptance_panel(fig, pts, "speculative_num_steps", "steps", {"size": 10, "symbol": "diamond"}, col=2)
    fig.update_xaxes(title_text="speculative steps", dtick=1, row=1, col=1)
    fig.update_xaxes(title_text="top-k", dtick=1, row=1, col=2)
    fig.update_yaxes(title_text="acceptance length (tokens per verify)", row=1, col=1)
    fig.update_layout(
        template=TEMPLATE,
        height=480,
        margin={"t": 40},
        legend={"orientation": "h", "x": 0.0, "y": -0.22, "title": {"text": "by top-k"}},
        legend2={"orientation": "h", "x": 0.56, "y": -0.22, "title": {"text": "by steps"}},
    )
    return fig if pts else _empty(fig, "no speculative trial reported an acceptance length")


def history_figure(rows: Sequence[RunReadBack], records: Sequence[TrialRecord] = ()) -> go.Figure:
    fig = go.Figure()
    ok = _ok(rows)
    groups = (
        ("completed", [r for r in ok if r.pruned_at_stage is None and not r.baseline], "circle", "#1f77b4"),
        (
            "stopped early by the pruner",
            [r for r in ok if r.pruned_at_stage is not None],
            "circle-open",
            "#1f77b4",
        ),
        ("baseline (no speculation)", [r for r in ok if r.baseline], "star", "#2ca02c"),
    )
    for name, sel, symbol, color in groups:
        if sel:
            fig.add_trace(
                go.Scatter(
                    x=[r.number for r in sel],
                    y=[r.tok_s for r in sel],
                    mode="markers",
                    marker={"symbol": symbol, "size": 10, "color": color, "line": {"width": 1.5}},
                    name=name,
                    text=[hover(r) for r in sel],
                    hovertemplate="%{text}<extra></extra>",
                )
            )
    for outcome in (
        Outcome.OOM,
        Outcome.PREDICTED_OOM,
        Outcome.SLA_MISSED,
        Outcome.FAILED,
        Outcome.INTERRUPTED,
    ):
        sel = [r for r in rows if r.outcome is outcome]
        if sel:
            style = STYLE[outcome]
            fig.add_trace(
                go.Scatter(
                    x=[r.number for r in sel],
                    y=[0.0] * len(sel),
                    mode="markers",
                    marker={
                        "symbol": style["symbol"],
                        "size": 9,
                        "color": style["color"],
                        "line": {"width": 2},
                    },
                    name=style["name"] + " (at 0)",
                    text=[hover(r) for r in sel],
                    hovertemplate="%{text}<extra></extra>",
                )
            )
    ordered = sorted(rows, key=lambda r: r.number)
    running = answer_so_far(ordered, records)  # the answer's own rule, as the console's `best` line
    line = [(r.number, b) for r, b in zip(ordered, running, strict=True) if b is not None]
    if line:
        fig.add_trace(
            go.Scatter(
                x=[p[0] for p in line],
                y=[p[1] for p in line],
                mode="lines",
                line={"shape": "hv", "color": "#d62728", "width": 2},
                name="the answer after each trial (its median)",
                hovertemplate="the answer so far: %{y:.1f} tok/s<extra></extra>",
            )
        )
        # Where the last trial moved the answer, the step line ends in a vertical drop under that trial's
        # marker: the final answer gets a marker of its own, drawn last, and its figure in the legend (a
        # label beside the marker sat on the trials' own markers).
        x, y = line[-1]
        mark = {"symbol": "diamond", "size": 13, "color": "#d62728", "line": {"width": 1, "color": "white"}}
        fig.add_trace(
            go.Scatter(x=[x], y=[y], mode="markers", marker=mark, name=f"the answer: {y:.1f} tok/s")
        )
    fig.update_layout(
        template=TEMPLATE,
        height=420,
        xaxis={"title": {"text": "trial number"}},
        yaxis={"title": {"text": "output tok/s"}, "rangemode": "tozero"},
        margin={"t": 20},
    )
    return fig if rows else _empty(fig, "no trial recorded")


def importance_figure(values: Sequence[tuple[str, float]]) -> go.Figure:
    ordered = list(reversed(values))  # plotly draws the first bar at the bottom
    fig = go.Figure(
        go.Bar(
            x=[v for _, v in ordered],
            y=[LABELS.get(n, n) for n, _ in ordered],
            orientation="h",
            marker={"color": "#1f77b4"},
            hovertemplate="%{y}: %{x:.3f}<extra></extra>",
        )
    )
    fig.update_layout(
        template=TEMPLATE,
        height=120 + 40 * len(values),
        xaxis={
            "title": {"text": "importance for tok/s of the searched values (fANOVA, sums to 1)"},
            "range": [0, 1],
        },
        margin={"t": 20, "l": 180},
    )
    return fig
