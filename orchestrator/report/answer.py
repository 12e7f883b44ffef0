"""The sweep's answer as the report shows it: the same choice the sweep made (`driver.answer.choose`), from
its best.json when that speaks of this study's launches, else from the runs read back (and the sweep's
own records of them where its journal holds them), with the command and memory account of the launch
that stands for it; and the answer's figure after each trial, for the history plot.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from mlflow.tracking import MlflowClient

from orchestrator.driver.answer.best_file import BEST_JSON, BestFile
from orchestrator.driver.answer.choose import Answer, Verdict, choose_answer
from orchestrator.driver.answer.conclusion import sweep_answer
from orchestrator.driver.answer.groups import Launch
from orchestrator.driver.store.journal import Journal
from orchestrator.engines.shell import shell_command
from orchestrator.mlflow_schema import (
    Artifact,
    Lossless,
    Metric,
    command_from_params,
    memory_from_metrics,
    memory_from_result,
)
from orchestrator.records import TrialRecord, TrialStatus
from orchestrator.report.data import RunReadBack

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BestConfig:
    """The sweep's answer as the report shows it: the configuration, its launches and their median (as
    `driver.answer.choose` chose them), and the launch whose command and memory account are shown."""

    row: RunReadBack  # the representative launch: its figure is the median (the lower middle one)
    command: str
    command_source: str  # where the command came from, said under it in the report
    memory: tuple[tuple[str, float], ...]
    speedup_vs_baseline: float | None = None
    config: str = ""  # the configuration's label
    launches: tuple[int, ...] = ()
    launch_tok_per_s: tuple[float, ...] = ()
    median_tok_per_s: float | None = None
    verdict: Verdict | None = None  # best.json's: how sure the sweep is
    nospec: bool = False  # the answer is the server without speculation
    versus_nospec: Verdict | None = None  # a speculative answer against the server without speculation
    split: str = ""  # where speculation pays and where it loses, and the policy that serves both
    lossy: int = 0  # speculative launches the lossless check set aside (their greedy output differed)
    node_note: str = ""  # the answer and the server without speculation never ran on one node


def journal_records(rows: Sequence[RunReadBack], study_dir: Path) -> list[TrialRecord]:
    """The sweep's own records of these runs (its journal, `runs/<study>/records/`), when it holds one for
    every measured run: with their stages, the answer is ranked as the sweep ranked it (the speculation
    model's predictions included); otherwise none, and the runs alone decide."""
    folder = study_dir / "records"
    wanted = {r.number for r in rows if r.status == TrialStatus.OK.value}
    if not wanted or not all(Journal(folder).path(n).is_file() for n in wanted):
        return []
    by_row = {r.number: r.config for r in rows}
    records = Journal(folder).read(by_row)
    # A journal left by an earlier study of the same name speaks of other configurations.
    if any(by_row.get(rec.number) != rec.result.config.label() for rec in records):
        return []
    return records


def answer_from_rows(rows: Sequence[RunReadBack], records: Sequence[TrialRecord] = ()) -> Answer | None:
    """The answer `driver.answer.choose` gives for the runs read back: the same choice as the sweep's
    (measured, not pruned, no lossy draft; the configurations ranked by their estimates; the baseline the
    answer when it leads beyond the noise). With the sweep's ``records`` of these runs, the sweep's own
    function (`driver.answer.conclusion.sweep_answer`) on them."""
    if records:
        numbers = {r.number for r in rows}
        lossy = {r.number for r in rows if r.lossless == Lossless.MISMATCH.value}
        return sweep_answer([rec for rec in records if rec.number in numbers], lossy)
    measured = [
        r
        for r in rows
        if r.status == TrialStatus.OK.value
        and r.objective is not None
        and r.pruned_at_stage is None
        and r.lossless != Lossless.MISMATCH.value
    ]
    launches = [Launch(r.number, r.config, r.objective or 0.0) for r in measured if not r.baseline]
    base = [Launch(r.number, r.config, r.objective or 0.0) for r in measured if r.baseline]
    return choose_answer(launches, base)


def answer_so_far(rows: Sequence[RunReadBack], records: Sequence[TrialRecord] = ()) -> list[float | None]:
    """After each trial (in trial order), the answer's figure so far (its median), by the answer's own
    rule: the line ends at the figure the sweep answers with, not at one launch's maximum."""
    ordered = sorted(rows, key=lambda r: r.number)
    out: list[float | None] = []
    for i in range(len(ordered)):
        answer = answer_from_rows(ordered[: i + 1], records)
        out.append(answer.median if answer is not None else None)
    return out


def find_best(
    rows: Sequence[RunReadBack], study_dir: Path, tracking_uri: str, records: Sequence[TrialRecord] = ()
) -> BestConfig | None:
    """The sweep's answer: its best.json when that speaks of launches of this study (it holds the real
    SGLang command whichever backend measured it), else the same choice made from the runs (and the
    sweep's ``records`` of them, where its journal holds them), with the representative run's own
    artifacts."""
    lossy = sum(1 for r in rows if r.lossless == Lossless.MISMATCH.value)
    from_json = _best_from_json(rows, study_dir)
    if from_json is not None:
        return replace(from_json, lossy=lossy)
    answer = answer_from_rows(rows, records)
    if answer is None:
        return None
    by_number = {r.number: r for r in rows}
    best = _best_from_run(by_number[answer.representative], tracking_uri)
    return replace(
        best,
        config=answer.config,
        launches=answer.launches,
        launch_tok_per_s=answer.values,
        median_tok_per_s=answer.median,
        verdict=answer.verdict,
        nospec=answer.nospec,
        versus_nospec=answer.versus_nospec,
        lossy=lossy,
    )


def _best_from_json(rows: Sequence[RunReadBack], study_dir: Path) -> BestConfig | None:
    best = BestFile.read(study_dir)
    if best is None:
        return None
    by_number = {r.number: r for r in rows}
    # A best.json left by an earlier study of the same name speaks of other trials of those numbers.
    for number in best.launches:
        row = by_number.get(number)
        if row is None or row.status != TrialStatus.OK.value or row.config != best.config_label:
            log.warning(
                "%s speaks of trial %d, not a launch of this study's answer; left out", BEST_JSON, number
            )
            return None
    row = by_number.get(best.trial)
    if row is None or not best.command:
        return None
    memory = best.memory or memory_from_metrics(row.metrics)
    return BestConfig(
        row,
        shell_command(best.command),
        BEST_JSON,
        tuple(memory.items()),
        best.speedup_vs_baseline,
        best.config_label,
        tuple(best.launches),
        tuple(best.launch_tok_per_s),
        best.median_tok_per_s,
        best.verdict,
        best.nospec,
        best.versus_nospec,
        best.split.statement if best.split is not None else "",
        node_note=best.node_note,
    )


def _best_from_run(row: RunReadBack, tracking_uri: str) -> BestConfig:
    command, source = "", ""
    memory: dict[str, float] = {}
    client = MlflowClient(tracking_uri=tracking_uri)
    with tempfile.TemporaryDirectory() as tmp:
        try:
            script = Path(client.download_artifacts(row.run_id, Artifact.LAUNCH_COMMAND, tmp)).read_text()
            command = script_command(script)
            source = f"the trial's {Artifact.LAUNCH_COMMAND.value}"
            result = Path(client.download_artifacts(row.run_id, Artifact.RESULT, tmp)).read_text()
            memory = memory_from_result(result)
        except Exception as err:  # artifacts may live on a store this machine cannot reach
            log.warning("artifacts of run %s unavailable: %s", row.run_id, err)
    if not command:
        command, source = command_from_params(row.params, row.server_version), "the trial's params"
    return BestConfig(
        row,
        command,
        source,
        tuple((memory or memory_from_metrics(row.metrics)).items()),
        row.metrics.get(Metric.SPEEDUP_VS_BASELINE),
    )


def script_command(text: str) -> str:
    """The command of a launch_command.sh as it was written (`engines.shell.shell_script`: `#!/bin/sh`,
    then `exec` and the command over continued lines), shown as it stands, never parsed back."""
    body = "\n".join(line for line in text.splitlines() if not line.startswith("#")).strip()
    return body.removeprefix("exec ")
