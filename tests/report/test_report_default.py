"""`make report` without STUDY= writes the report of the study started last, and says which."""

from __future__ import annotations

import time
from pathlib import Path

import optuna
import pytest

from orchestrator.report.page import last_study, main


def test_the_last_study_is_the_one_started_last(tmp_path: Path) -> None:
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    for name in ("first", "second"):
        study = optuna.create_study(study_name=name, storage=storage)
        study.tell(study.ask(), 1.0)
        time.sleep(0.05)
    assert last_study(storage) == "second"


def test_no_study_yet_is_a_one_line_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--out", str(tmp_path / "runs")]) == 2  # bad input, as the sweep exits for it
    assert "no study in" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()
