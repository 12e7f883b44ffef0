"""The report's sections as HTML: the best configuration (`best_section`), its memory account
(`memory_section`), every trial (`trials_section`) and the traffic with the lossless check
(`traffic_section`). The page (`report.page`) puts them together with the plots."""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence

from orchestrator.config.adaptive import AdaptiveMode
from orchestrator.config.codec import engine_value_name
from orchestrator.driver.answer.choose import Call
from orchestrator.engines import engine_for
from orchestrator.mlflow_schema import Lossless, Metric, Param, run_engine
from orchestrator.records import TrialStatus
from orchestrator.report.answer import BestConfig
from orchestrator.report.data import RunReadBack
from orchestrator.report.memory_rows import account_rows
from orchestrator.spec.search import SEARCHED_PARAMS


def _e(value: object) -> str:
    return html.escape(str(value))


def _num(value: float | None, spec: str = ".1f") -> str:
    return format(value, spec) if value is not None else "-"


def _table(head: Sequence[str], body: Sequence[Sequence[str]], row_classes: Sequence[str] = ()) -> str:
    """Cells arrive escaped; numbers (plain or '-') are right-aligned."""
    cls = list(row_classes) or [""] * len(body)
    out = ["<table><tr>" + "".join(f"<th>{_e(h)}</th>" for h in head) + "</tr>"]
    for c, cells in zip(cls, body, strict=True):
        tds = "".join(f'<td class="num">{x}</td>' if _is_number(x) else f"<td>{x}</td>" for x in cells)
        out.append(f'<tr class="{c}">{tds}</tr>')
    return "\n".join([*out, "</table>"])


def _is_number(text: str) -> bool:
    try:
        float(text.replace(",", ""))
    except ValueError:
        return text == "-"
    return True


def _memory_value(key: str, value: float) -> tuple[str, str]:
    if key.endswith("_tokens"):
        return f"{value:,.0f}", "tokens"
    # A `_gb` figure is the log's "GB", which is GiB (2^30 bytes): labelled what it is.
    for suffix, unit in (("_gb", "GiB"), ("_gib", "GiB"), ("_mib", "MiB"), ("_bytes", "bytes")):
        if key.endswith(suffix):
            return f"{value:,.2f}", unit
    return f"{value:g}", ""


def best_section(best: BestConfig | None) -> str:
    if best is None:
        return '<p class="note">No configuration completed a benchmark within the objective\'s limits.</p>'
    r = best.row
    launches = ", ".join(map(str, best.launches)) or str(r.number)
    each = ", ".join(_num(v) for v in best.launch_tok_per_s)
    nospec = " (the server without speculation)" if best.nospec else ""
    facts = [
        ("configuration", (best.config or r.config) + nospec),
        ("launches (trials)", f"{len(best.launches) or 1} ({launches})"),
        (
            "median tok/s of its launches",
            _num(best.median_tok_per_s if best.median_tok_per_s else r.objective),
        ),
        ("tok/s of each launch", each or _num(r.objective)),
        ("speed-up over the no-speculation baseline", _num(best.speedup_vs_baseline, ".2f")),
        (f"trial {r.number} (the median launch): acceptance length", _num(r.accept_length, ".2f")),
        (f"trial {r.number}: p99 ITL (ms)", _num(r.metrics.get(Metric.ITL_P99_MS))),
        (f"trial {r.number}: p99 TTFT (ms)", _num(r.metrics.get(Metric.TTFT_P99_MS))),
        (f"trial {r.number}: best concurrency", _num(r.metrics.get(Metric.BEST_CONCURRENCY), ".0f")),
        (f"trial {r.number}: start-up (s)", _num(r.metrics.get(Metric.STARTUP_S))),
    ]
    params = [(p, _num(r.value(p), "g")) for p in SEARCHED_PARAMS if r.value(p) is not None]
    # the engine's own values, under the flag the engine sets each by (`_flag`, the engine's `flag_name`)
    params += [
        (k, _num(r.value(k), "g"))
        for k in sorted(r.params)
        if engine_value_name(k) and r.value(k) is not None
    ]
    verdict = ""
    if best.verdict is not None:
        cls = "note" if best.verdict.call is Call.TOO_CLOSE else "muted"
        verdict = (
            f'<p class="{cls}" id="verdict"><strong>Confidence:</strong> {_e(best.verdict.statement)}</p>'
        )
        if best.verdict.ci95 is not None:
            low, high = best.verdict.ci95
            facts.append(("95 % interval of the median (tok/s)", f"{_num(low)} to {_num(high)}"))
    if best.nospec:
        call = best.verdict.call if best.verdict is not None else Call.CLEARLY_AHEAD
        why = {
            Call.CLEARLY_AHEAD: "the server without speculation leads the best speculative configuration "
            "beyond the noise",
            Call.TOO_CLOSE: "the server without speculation leads the best speculative configuration within "
            "the noise: the faster one measured, too close to call",
            Call.ALONE: "no speculative configuration completed a benchmark that can be recommended (see the "
            "trials below)",
        }[call]
        if call is Call.ALONE and best.lossy:
            # The console's reason, said here too: a lossy draft, not a failed launch, left no candidate.
            why = (
                f"no speculative configuration passed the lossless check ({best.lossy} lossy: the greedy "
                'output differed from the server without speculation; see <a href="#traffic">the lossless '
                "check</a>)"
            )
        verdict = (
            f'<p class="note" id="nospec"><strong>Serve without speculation:</strong> {why}; its launch '
            "command has no speculative flag.</p>\n" + verdict
        )
    elif best.versus_nospec is not None:
        # First, as on the console: whether to speculate at all, then how sure the answer is among trees.
        verdict = (
            f'<p class="muted" id="nospec"><strong>Against no speculation:</strong> '
            f"{_e(best.versus_nospec.statement)}</p>\n" + verdict
        )
    if best.node_note:
        said = best.node_note.removeprefix("note: ")
        verdict += f'\n<p class="note" id="nodes"><strong>Across nodes:</strong> {_e(said)}</p>'
    if best.split:
        verdict += f'\n<p class="note" id="split"><strong>By concurrency level:</strong> {_e(best.split)}</p>'
    return "\n".join(
        [
            verdict,
            _table(["", "value"], [[_e(k), _e(v)] for k, v in facts]),
            "<h3>Searched values</h3>",
            _table(["flag", "value"], [[_e(_flag(r, k)), _e(v)] for k, v in params]),
            f"<h3>Launch command of trial {r.number} "
            f'<span class="muted">(from {_e(best.command_source)})</span></h3>',
            f'<pre id="best-command">{_e(best.command)}</pre>',
        ]
    )


def _flag(row: RunReadBack, param: str) -> str:
    """The flag of a searched param as the run's own engine spells it on the run's version; the param's
    name when that engine is not registered here (a plug-in's run, read without the plug-in)."""
    try:
        engine = engine_for(run_engine(row.params))
    except KeyError:
        return param
    return engine.flag_name(param, row.server_version)


def memory_section(best: BestConfig | None) -> str:
    if best is None or not best.memory:
        return '<p class="note">No memory account: no best trial, or its log gave no memory figures.</p>'
    body = []
    for key, value, note in account_rows(dict(best.memory)):
        shown, unit = _memory_value(key, value)
        body.append([_e(key), shown, _e(unit), _e(note)])
    intro = (
        f"<p>As the server of trial {best.row.number} reported it at start-up, per GPU (GiB, which "
        'SGLang\'s log prints as "GB").</p>'
    )
    return intro + _table(["figure", "value", "unit", "what it is"], body)


def _cut(message: str, limit: int = 600) -> str:
    """A message as the table shows it (the whole of it in the cell's title): a diagnosis with its advice
    fits; a longer server message is cut at a word, marked."""
    if len(message) <= limit:
        return message
    return message[:limit].rsplit(" ", 1)[0] + " …"


def trials_section(rows: Sequence[RunReadBack]) -> str:
    head = ["#", "status", "tok/s", "objective", "accept", "p99 TTFT (ms)", "p99 ITL (ms)", "start-up (s)"]
    head += ["KV tokens", "configuration", "failure", "diagnosis / failure message"]
    body = []
    for r in rows:
        message = r.diagnosis or r.failure_message
        failure = f"{r.failure_stage}/{r.failure_kind}" if r.failure_stage else ""
        status = r.status + (" (baseline)" if r.baseline else "")
        if r.pruned_at_stage is not None:
            status += f" (pruned at stage {r.pruned_at_stage})"
        body.append(
            [
                str(r.number),
                _e(status),
                _num(r.tok_s),
                _num(r.objective),
                _num(r.accept_length, ".2f"),
                _num(r.metrics.get(Metric.TTFT_P99_MS)),
                _num(r.metrics.get(Metric.ITL_P99_MS)),
                _num(r.metrics.get(Metric.STARTUP_S)),
                _num(r.metrics.get(Metric.KV_CACHE_TOKENS), ",.0f"),
                _e(r.config),
                _e(failure),
                f'<div class="msg" title="{_e(message)}">{_e(_cut(message))}</div>' if message else "",
            ]
        )
    return _table(head, body, [r.outcome.value for r in rows])


def _per_dataset(metrics: Mapping[str, float], name: str, form: str, labelled: bool) -> str:
    """A trial's ``name.<dataset>`` metrics in one cell: each after its dataset's name where ``labelled``
    (a mix), else the figures alone."""
    keys = sorted(k.split(".", 1)[1] for k in metrics if k.startswith(f"{name}."))
    if len(keys) == 1 and not labelled:
        return form.format(metrics[f"{name}.{keys[0]}"])
    return ", ".join(f"{d} {form.format(metrics[f'{name}.{d}'])}" for d in keys)


def traffic_section(rows: Sequence[RunReadBack]) -> str:
    """Per trial: the dataset mix, the speculation policy, acceptance and tok/s per dataset, and the
    lossless check's verdict (a mismatch in red, with the prompt, position and both tokens)."""
    lossy = [r for r in rows if r.lossless == Lossless.MISMATCH]
    notes = []
    if lossy:
        notes.append(
            f'<p class="bad"><b>Lossy speculation: {len(lossy)} trial(s) changed the greedy output.</b> '
            "At temperature 0 speculative decoding must reproduce the baseline exactly.</p>"
        )
    body, classes = [], []
    for r in rows:
        if r.status != TrialStatus.OK.value:
            continue
        dataset = str(r.params.get(Param.DATASET, "random"))
        # A mix's label lists each dataset with its weight ("a 0.7, b 0.3"); one dataset's figures stand
        # alone, the dataset column beside them naming it.
        mix = ", " in dataset
        accept = _per_dataset(r.metrics, "accept_length", "{:.2f}", mix) or "-"
        tok = _per_dataset(r.metrics, "output_tok_per_s", "{:.1f}", mix)
        verdict = r.lossless or "-"
        if r.lossless == Lossless.MISMATCH:
            verdict = f"MISMATCH: {r.lossless_detail}"
        elif r.lossless == Lossless.NEAR_TIE:
            verdict = f"near tie (numerics, not lossy): {r.lossless_detail}"
        body.append(
            [
                str(r.number),
                r.config,
                dataset,
                str(r.params.get(Param.SPECULATIVE_ADAPTIVE, AdaptiveMode.OFF.value)),
                accept,
                tok or "-",
                verdict,
            ]
        )
        classes.append("bad" if r.lossless == Lossless.MISMATCH else "")
    head = ["#", "configuration", "dataset", "adaptive", "accept length", "tok/s", "lossless"]
    return "".join(notes) + _table(head, [[_e(c) for c in row] for row in body], classes)
