"""One answer everywhere: after a sweep in which the best configuration was launched twice, the console,
best.json, the MLflow parent run and the report name the same configuration, the same launches and the
same median.

Seen on an H200 chat sweep: the console and best.json named trial 2 (3551.8 tok/s, one launch), the
report's "Best configuration" trial 7 (3716.7, another launch of the same configuration) and the
confidence line the median, 3634.3. The sweep here is written through the sweep's own funnel (settle,
tell, the observers' records, the real Tracker), then concluded as the CLI concludes it.
"""

from __future__ import annotations

import html
import re
from dataclasses import replace
from pathlib import Path

import optuna
import pytest
from mlflow.tracking import MlflowClient

from orchestrator.driver.answer.best_file import BestFile
from orchestrator.driver.answer.conclusion import BEST_METRIC, conclude
from orchestrator.mlflow_schema import Param, Tag, sweep_tags
from orchestrator.records import TrialStatus
from orchestrator.report import write_report
from tests.report_fixture import BEST, PLAN, STUDY, Planned, fixture_spec, run_plan

# Trial 2's configuration launched again: its second launch is the highest figure of the study.
AGAIN = Planned(8, next(p.config for p in PLAN if p.number == BEST), TrialStatus.OK, 2240.0, 3.4, 18.0, 250.0)


def best_section(page: str) -> str:
    match = re.search(r'<section id="best">(.*?)</section>', page, re.S)
    assert match is not None
    return html.unescape(match.group(1))


@pytest.mark.slow  # a whole sweep, its report and MLflow read back
def test_console_best_json_mlflow_and_the_report_state_one_answer(tmp_path: Path) -> None:
    tracking_uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    study_dir = tmp_path / STUDY
    study_dir.mkdir()
    from orchestrator.driver.store.tracking import Tracker

    tracker = Tracker(tracking_uri, STUDY, tmp_path / "spool")
    tracker.start("sweep", params={Param.TRIALS.value: "9"}, tags=sweep_tags(STUDY, resume=False))
    study = optuna.create_study(study_name=STUDY, storage=storage, direction="maximize")
    records = run_plan(study, tracker, (*PLAN, replace(AGAIN)))

    concluded = conclude(records, fixture_spec(), study_dir)
    tracker.finish(concluded.parent_metrics(), list(concluded.written), tags=concluded.parent_tags())
    write_report(STUDY, tracking_uri, storage, study_dir / "report.html")

    label = AGAIN.config.label()
    median = (2100.0 + 2240.0) / 2
    # The console
    console = "\n".join(concluded.lines)
    assert f"best: trials 2, 8 (one configuration), median {median:.1f} tok/s of 2 launches" in console
    assert label in console
    # best.json
    best = BestFile.read(study_dir)
    assert best is not None and best.launches == [2, 8] and best.median_tok_per_s == median
    assert best.config_label == label and best.trial == 2  # the command is the median launch's
    assert f"confidence: {best.verdict.statement}" in console
    # The MLflow parent run
    parent = MlflowClient(tracking_uri).get_run(tracker.parent_run_id).data
    assert parent.metrics[BEST_METRIC] == median
    assert parent.tags[Tag.ANSWER_LAUNCHES.value] == "2,8" and parent.tags[Tag.ANSWER_CONFIG.value] == label
    assert parent.tags[Tag.ANSWER_VERDICT.value] == best.verdict.statement
    # The report's "Best configuration"
    section = best_section((study_dir / "report.html").read_text())
    assert label in section and "2 (2, 8)" in section and f"{median:.1f}" in section
    assert "2100.0, 2240.0" in section and best.verdict.statement in section
    assert "(the median launch)" in section and "trial 8 (the median launch)" not in section


@pytest.mark.slow  # a whole sweep, its report and MLflow read back
def test_the_report_without_best_json_makes_the_same_choice(tmp_path: Path) -> None:
    tracking_uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    from orchestrator.driver.store.tracking import Tracker

    tracker = Tracker(tracking_uri, STUDY, tmp_path / "spool")
    tracker.start("sweep", params={Param.TRIALS.value: "9"}, tags=sweep_tags(STUDY, resume=False))
    study = optuna.create_study(study_name=STUDY, storage=storage, direction="maximize")
    run_plan(study, tracker, (*PLAN, replace(AGAIN)))
    tracker.finish({}, [])
    page = write_report(STUDY, tracking_uri, storage, tmp_path / "alone" / "report.html").read_text()
    section = best_section(page)
    # Not trial 8's single highest figure: the configuration's median over its two launches.
    assert "2 (2, 8)" in section and "2170.0" in section


@pytest.mark.slow  # a whole sweep, its report and MLflow read back
def test_when_the_server_without_speculation_leads_every_place_names_it(tmp_path: Path) -> None:
    """The H200 case: without speculation the server measured about twice the best speculative figure,
    and the `best:` line, best.json and its command still named the speculative configuration."""
    tracking_uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    study_dir = tmp_path / STUDY
    study_dir.mkdir()
    from orchestrator.driver.store.tracking import Tracker

    tracker = Tracker(tracking_uri, STUDY, tmp_path / "spool")
    tracker.start("sweep", params={Param.TRIALS.value: "8"}, tags=sweep_tags(STUDY, resume=False))
    study = optuna.create_study(study_name=STUDY, storage=storage, direction="maximize")
    fast = tuple(replace(p, tok_s=5000.0) if p.baseline else p for p in PLAN)
    records = run_plan(study, tracker, fast)
    concluded = conclude(records, fixture_spec(), study_dir)
    tracker.finish(concluded.parent_metrics(), list(concluded.written), tags=concluded.parent_tags())
    write_report(STUDY, tracking_uri, storage, study_dir / "report.html")

    label = PLAN[0].config.label()
    assert concluded.lines[0] == f"\nbest: serve without speculation: trial 0, 5000.0 tok/s, {label}"
    best = BestFile.read(study_dir)
    assert best is not None and best.nospec and best.launches == [0] and best.config_label == label
    assert not [a for a in best.command if a.startswith("--speculative")]
    parent = MlflowClient(tracking_uri).get_run(tracker.parent_run_id).data
    assert parent.metrics[BEST_METRIC] == 5000.0
    assert parent.tags[Tag.ANSWER_SPECULATION.value] == "off"
    assert parent.tags[Tag.ANSWER_CONFIG.value] == label and parent.tags[Tag.ANSWER_LAUNCHES.value] == "0"
    assert parent.tags[Tag.ANSWER_VERDICT.value] == best.verdict.statement
    assert "the server without speculation (trial 0) is 138.1 % ahead of trial 2" in best.verdict.statement
    section = best_section((study_dir / "report.html").read_text())
    assert f"{label} (the server without speculation)" in section and "Serve without speculation" in section
    assert "--speculative" not in section
    # Without best.json the report makes the same choice from the runs.
    page = write_report(STUDY, tracking_uri, storage, tmp_path / "alone" / "report.html").read_text()
    assert f"{label} (the server without speculation)" in best_section(page)
