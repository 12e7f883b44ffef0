"""The report ranks the answer as the sweep did: with the sweep's journal of its runs, the speculation
model's predictions are part of the ranking (`report.answer.journal_records`), so the history's "best so
far" line ends at the figure the console, best.json and MLflow state, not at another configuration's."""

from __future__ import annotations

from pathlib import Path

from orchestrator.driver.answer.conclusion import sweep_answer
from orchestrator.driver.store.journal import Journal
from orchestrator.mlflow_schema import Metric
from orchestrator.records import TrialRecord
from orchestrator.report.answer import answer_from_rows, answer_so_far, journal_records
from orchestrator.report.data import RunReadBack
from tests.driver.answer.test_model_ranking import config, sweep


def rows_of(records: list[TrialRecord]) -> list[RunReadBack]:
    return [
        RunReadBack(
            number=r.number,
            run_id=f"run{r.number}",
            status=r.result.status.value,
            config=r.result.config.label(),
            metrics={Metric.OBJECTIVE.value: float(r.objective or 0.0)},
        )
        for r in records
    ]


def test_with_the_journal_the_report_answers_as_the_sweep(tmp_path: Path) -> None:
    records, best, runner_up = sweep()
    rows = rows_of(records)
    journal = Journal(tmp_path / "records")
    for r in records:
        journal.write(r)
    answer = sweep_answer(records)
    assert answer is not None and answer.config == config(best).label()
    # From the runs alone (no stages, so no model): the runner-up, whose median is higher.
    alone = answer_from_rows(rows)
    assert alone is not None and alone.config == config(runner_up).label()
    read = journal_records(rows, tmp_path)
    assert [r.number for r in read] == [r.number for r in records]
    again = answer_from_rows(rows, read)
    assert again is not None and again.config == answer.config and again.launches == answer.launches
    assert answer_so_far(rows, read)[-1] == answer.median
    assert answer_so_far(rows)[-1] != answer.median


def test_a_journal_missing_a_run_or_of_another_study_is_not_used(tmp_path: Path) -> None:
    records, _, _ = sweep()
    rows = rows_of(records)
    journal = Journal(tmp_path / "records")
    for r in records[1:]:
        journal.write(r)
    assert journal_records(rows, tmp_path) == []  # trial 0 has no record
    journal.write(TrialRecord(0, records[-1].result, records[-1].objective))  # another configuration as 0
    assert journal_records(rows, tmp_path) == []
    assert journal_records(rows, tmp_path / "nowhere") == []
