"""The end of a sweep: the table of trials and the best configuration with its launch command."""

from __future__ import annotations

import json
import statistics
import textwrap
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator.config.adaptive import CONFIG_FILE
from orchestrator.driver.answer.best_file import BEST_COMMAND, BestFile, Level, gib_keys
from orchestrator.driver.answer.choose import Answer
from orchestrator.driver.answer.levels import level_calls, split_of
from orchestrator.driver.answer.nodes import node_note
from orchestrator.driver.answer.runtime_policy import best_by_concurrency, runtime_policy
from orchestrator.driver.store.trial_attrs import TrialAttr
from orchestrator.engines.engine import LaunchSettings, TrialLaunch
from orchestrator.engines.launch import SIM_SERVER_MODULE, command_argv
from orchestrator.engines.shell import shell_script
from orchestrator.records import TrialRecord, TrialStatus
from orchestrator.secrets import mask_argv
from orchestrator.spec.sweep_spec import SweepSpec

if TYPE_CHECKING:
    from optuna.trial import FrozenTrial

WIDTH = 100  # the table and its notes fit a 100-column terminal
SGLANG_PYTHON = "python3"  # the answer's interpreter when a simulated node measured it


def sglang_command(record: TrialRecord, spec: SweepSpec) -> list[str]:
    """The real engine's command for a configuration, whichever node kind measured it, with the Python
    the node ran the trial with (the one the engine is installed in there), not whatever `python` is on
    PATH (a simulated node's, which has no SGLang: `python3`); rendered as its launch was
    (`engines.launch.command_argv`), secrets masked."""
    settings = LaunchSettings.from_spec(spec)
    ran = record.result.command
    if ran[1:3] == ("-m", SIM_SERVER_MODULE):
        # The simulated node's interpreter has no SGLang (the demo's is the checkout's .venv): name the one
        # a user's SGLang is installed in, as SGLang's own docs do.
        settings = replace(settings, python=SGLANG_PYTHON)
    elif ran:
        settings = replace(settings, python=ran[0])
    launch = TrialLaunch(
        settings,
        record.result.config,
        version=record.result.server_version or "0.5.17",
        port=30000,
        tp_size=spec.node.gpus,
        adaptive_config_path=CONFIG_FILE,
    )
    argv = command_argv(launch)
    return list(mask_argv(argv, settings.secret_flags))


def write_best(
    answer: Answer, records: Sequence[TrialRecord], spec: SweepSpec, study_dir: Path
) -> tuple[BestFile, list[Path]]:
    """best.json and best_command.sh (and the adaptive tiers file it names) for ``answer``, and the
    paths written. ``records`` are those that may be recommended (no lossy draft); the command, memory
    account and acceptance are those of the answer's representative launch, whose figure is the median."""
    by_number = {r.number: r for r in records}
    record = by_number[answer.representative]
    argv = sglang_command(record, spec)
    r = record.result
    levels = best_by_concurrency(records, r.config, answer.noise)
    base = [x.result.output_tok_per_s for x in records if x.baseline and x.result.output_tok_per_s]
    by_level = level_calls(records, answer.comparison) if answer.comparison is not None else []
    speculative = by_number.get(answer.comparison.speculative.representative) if answer.comparison else None
    split = split_of(by_level, speculative.result.config) if speculative is not None else None
    if split is not None:
        policy: dict[str, Any] = split.runtime_policy or runtime_policy(record, levels)
    elif answer.nospec:
        policy = {"speculation": "off", "measured": True}
    else:
        policy = runtime_policy(record, levels)
    best = BestFile(
        config_label=answer.config,
        config=BestFile.config_fields(r.config),
        launches=list(answer.launches),
        launch_tok_per_s=list(answer.values),
        median_tok_per_s=answer.median,
        trial=record.number,
        verdict=answer.verdict,
        speedup_vs_baseline=answer.median / statistics.median(base) if base and not answer.nospec else None,
        accept_length=r.accept_length,
        memory=gib_keys(r.memory.as_metrics()),
        resolved_args=r.resolved_args.as_dict(),
        server_version=r.server_version,
        command=argv,
        dataset=r.dataset,
        best_by_concurrency=[Level.model_validate(lv) for lv in levels],
        runtime_policy=policy,
        nospec=answer.nospec,
        versus_nospec=answer.versus_nospec,
        speculation_by_level=by_level,
        node_note=node_note(answer, records),
        split=split,
    )
    written = [best.write(study_dir)]
    sh_path = study_dir / BEST_COMMAND
    sh_path.write_text(shell_script(argv))
    sh_path.chmod(0o755)
    written.append(sh_path)
    if r.adaptive_config:  # best_command.sh passes it by its file name
        (study_dir / CONFIG_FILE).write_text(r.adaptive_config)
        written.append(study_dir / CONFIG_FILE)
    return best, written


# -- the table ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ConsoleRow:
    """One row of the console's trial table, from this run's record or the study's trial attributes."""

    number: int
    status: str
    config: str
    baseline: bool = False
    tok_s: float | None = None
    figures: Mapping[str, float | None] | None = None  # TrialResult.table_figures() names
    reason: str = ""  # for a trial that did not complete: stage and the server's words
    repeat_of: int | None = None  # answered from that trial's record, not launched


def row_from_record(rec: TrialRecord) -> ConsoleRow:
    r = rec.result
    reason = ""
    if r.failure is not None and r.status is not TrialStatus.OK:
        reason = f"{r.failure.stage.value}: {r.failure.message}"
    return ConsoleRow(
        rec.number,
        r.status.value,
        r.config.label(),
        rec.baseline,
        r.output_tok_per_s,
        r.table_figures(),
        reason,
    )


def row_from_trial(trial: FrozenTrial) -> ConsoleRow | None:
    """A finished trial of the study (this run's or an earlier one's), an interrupted one included (it
    shows as such: its configuration was re-queued); None for what is not a trial of this study's own (a
    warm-start seed), not finished, or closed with no status (by a version that did not record one)."""
    attrs = trial.user_attrs
    status = attrs.get(TrialAttr.STATUS)
    if not trial.state.is_finished() or not status or TrialAttr.WARM_START_FROM in attrs:
        return None
    failure = str(attrs.get(TrialAttr.FAILURE) or "")
    head, _, message = failure.partition(": ")
    repeat = attrs.get(TrialAttr.REPEAT_OF)
    return ConsoleRow(
        number=trial.number,
        status=str(status),
        config=str(attrs.get(TrialAttr.CONFIG, "")),
        baseline=bool(attrs.get(TrialAttr.BASELINE)),
        tok_s=_float(attrs.get(TrialAttr.OUTPUT_TOK_PER_S)),
        figures={k: _float(v) for k, v in attrs.items() if isinstance(v, int | float)},
        reason=f"{head.split('/')[0]}: {message}" if failure and status != TrialStatus.OK.value else "",
        repeat_of=int(repeat) if isinstance(repeat, int) else None,
    )


def table_rows(trials: Iterable[FrozenTrial], records: Sequence[TrialRecord]) -> list[ConsoleRow]:
    """Every trial of the study, earlier invocations included; this run's own records where there are
    (they hold more than the study's attributes)."""
    rows: dict[int, ConsoleRow] = {}
    for t in trials:
        row = row_from_trial(t)
        if row is not None:
            rows[row.number] = row
    rows.update((rec.number, row_from_record(rec)) for rec in records)
    return [rows[n] for n in sorted(rows)]


def _float(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class _Column:
    name: str
    unit: str
    key: str
    spec: str


COLUMNS = (
    _Column("tok/s", "output", "tok_s", ".1f"),
    _Column("speedup", "x base", "speedup", ".2f"),
    _Column("accept", "length", "accept_length", ".2f"),
    _Column("TTFT", "p99 ms", "ttft_p99_ms", ".0f"),
    _Column("ITL", "p99 ms", "itl_p99_ms", ".1f"),
    _Column("KV", "tokens", "kv_cache_tokens", "tokens"),
)


def _cell(value: float | None, spec: str) -> str:
    if value is None:
        return "-"
    if spec == "tokens":  # 12,379,562 tokens do not fit a narrow column; 12.4M does
        for size, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
            if value >= size:
                return f"{value / size:.1f}{suffix}"
        return f"{value:.0f}"
    return format(value, spec)


def render_table(rows: Sequence[ConsoleRow], budget: int | None = None) -> str:
    """The trials, one line each (plus one line of reason under a trial that failed), columns aligned
    with units in the header, and a count line that says what the rows are."""
    by_number = {r.number: r for r in rows}
    base = next((r.tok_s for r in rows if r.baseline and r.tok_s), None)
    body: list[tuple[list[str], str]] = []  # (cells, note under the row)
    for r in rows:
        src = by_number.get(r.repeat_of, r) if r.repeat_of is not None else r
        values = {**(src.figures or {}), "tok_s": src.tok_s}
        if base and src.tok_s and not r.baseline:
            values["speedup"] = src.tok_s / base
        config = r.config or src.config
        label = config + (" (baseline)" if r.baseline else "")
        note = src.reason
        if r.repeat_of is not None:
            # under another name, it is a server the engine serves as one (`spec.engine_space.SameServer`)
            same = "configuration" if config == src.config else "server"
            note = f"same {same} as trial {r.repeat_of}: answered from its record, not launched"
        cells = [str(r.number), r.status, *(_cell(values.get(c.key), c.spec) for c in COLUMNS), label]
        body.append((cells, note))
    header = [["#", "status", *(c.name for c in COLUMNS), "configuration"]]
    header.append(["", "", *(c.unit for c in COLUMNS), ""])
    widths = [max(len(cells[i]) for cells in [*header, *(b[0] for b in body)]) for i in range(len(header[0]))]

    def line(cells: list[str]) -> str:
        # Numbers right-aligned (the `-` of a missing value sits where the last digit would), text left.
        parts = [cells[0].rjust(widths[0]), cells[1].ljust(widths[1])]
        parts += [c.rjust(w) for c, w in zip(cells[2:-1], widths[2:-1], strict=True)]
        return (" ".join(parts) + "  " + cells[-1]).rstrip()

    out = [line(h) for h in header]
    out.append("-" * min(WIDTH, max(len(x) for x in out)))
    indent = " " * (widths[0] + 1)
    for (cells, note), r in zip(body, rows, strict=True):
        out.append(line(cells))
        if note and r.status == TrialStatus.INTERRUPTED.value:
            # Our own words, whose end says what became of the trial (not counted, queued again): whole.
            out.extend(textwrap.wrap(note, WIDTH, initial_indent=indent, subsequent_indent=indent))
        elif note:  # a server's words, which can run long: its first line's worth
            out.append(indent + cut_at_word(note, WIDTH - len(indent)))
    out.append(count_line(rows, budget))
    return "\n".join(out)


def cut_at_word(text: str, width: int) -> str:
    """`text` in at most `width` characters, cut between words and marked " ..." where cut. Unlike
    textwrap.shorten it never breaks a flag at a hyphen (`--mem-fraction-` read as a flag of its own)."""
    words = text.split()
    if len(" ".join(words)) <= width:
        return " ".join(words)
    kept = ""
    for word in words:
        longer = f"{kept} {word}" if kept else word
        if len(longer) + len(" ...") > width:
            break
        kept = longer
    return f"{kept} ..."


def count_line(rows: Sequence[ConsoleRow], budget: int | None = None) -> str:
    """What the rows are: the trials launched, and those that cost no launch and no budget."""
    predicted = sum(1 for r in rows if r.status == TrialStatus.PREDICTED_OOM.value and r.repeat_of is None)
    repeats = sum(1 for r in rows if r.repeat_of is not None)
    lost = sum(1 for r in rows if r.status == TrialStatus.LOST.value)
    interrupted = sum(1 for r in rows if r.status == TrialStatus.INTERRUPTED.value)
    launched = len(rows) - predicted - repeats - lost - interrupted
    # A baseline predicted OOM was not launched either (nor lost, nor interrupted): it is no launch.
    free = (TrialStatus.LOST.value, TrialStatus.INTERRUPTED.value, TrialStatus.PREDICTED_OOM.value)
    baselines = sum(1 for r in rows if r.baseline and r.status not in free and r.repeat_of is None)
    counted = launched - baselines
    of_budget = f"{counted} of the {budget}-trial budget" if budget is not None else f"{counted} budgeted"
    parts = [
        f"{launched} launched" + (f" (the baseline + {of_budget})" if baselines else f" ({of_budget})"),
        f"{predicted} predicted OOM (not launched)",
        f"{repeats} repeated a measured configuration (answered from the record)",
        f"{lost} lost with their node (re-queued)",
    ]
    if interrupted:  # the driver stopped under them: shown, and run again, never charged
        parts.append(f"{interrupted} interrupted (re-queued, not counted)")
    # Not a number first: under the table a line starting "16 trials" read like the row of trial 16.
    return textwrap.fill(f"in all, {len(rows)} trials: " + ", ".join(parts), WIDTH, subsequent_indent="  ")


def render_levels(best: BestFile) -> str:
    """The best setting per concurrency level (or none) and the policy to launch with, for the CLI."""
    if best.split is not None:
        return f"by concurrency level: {best.split.statement}"
    lines = ["best setting per concurrency level:"]
    for lv in best.best_by_concurrency:
        # A level the server without speculation led says so; a speculative one names its whole tree,
        # not its steps alone (two levels led by trees of one depth and another top-k read as one).
        tree = lv.tree()
        setting = (
            "no speculation"
            if tree is None
            else f"{tree.label()} (steps {tree.steps}, adaptive {lv.speculative_adaptive})"
        )
        accept = "" if tree is None else f", accept {_cell(lv.accept_length, '.2f')}"
        median = f" (median of {lv.launches} launches)" if lv.launches > 1 else ""
        lead = ""
        if lv.answer_tok_per_s:  # another configuration than the answer: on how many launches, by how much
            median = median or " (1 launch)"
            ahead = 100 * (lv.output_tok_per_s / lv.answer_tok_per_s - 1)
            lead = f", {ahead:.1f} % ahead of the answer's {lv.answer_tok_per_s:.1f} there"
        figure = f"{lv.output_tok_per_s:.1f} tok/s{median}{lead}{accept}"
        lines.append(f"  {lv.concurrency:>5} concurrent: {setting}, {figure}  trial {lv.trial}")
        if lv.higher_config is not None and lv.higher_tok_per_s is not None:
            name = lv.higher_config if lv.higher_speculative else "no speculation"
            runs = f"{lv.higher_launches} launch{'es' if (lv.higher_launches or 1) > 1 else ''}"
            lines.append(
                f"{'':>20}higher here but within the noise: {name} {lv.higher_tok_per_s:.1f} tok/s"
                f" ({runs}, trial {lv.higher_trial})"
            )
    if best.nospec:
        # Each level still listed: a user serving at one load reads whether a tree drew higher there
        # (the real pair's s6k8d16 at 8 concurrent, inside the noise), not the policy line alone.
        lines.append("runtime policy: no speculation (the launch command has no speculative flag)")
        return "\n".join(lines)
    policy = best.runtime_policy
    lines.append(f"runtime policy: speculative_adaptive {policy.get('speculative_adaptive', 'off')}")
    if "suggested_adaptive_config" in policy:
        lines.append(f"  suggested tiers (not measured): {json.dumps(policy['suggested_adaptive_config'])}")
    return "\n".join(lines)
