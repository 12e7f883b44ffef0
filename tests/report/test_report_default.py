"""`make report` without STUDY= writes the report of the study run last, and says which."""

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


def test_the_last_study_run_is_the_one_a_resume_continued_last(tmp_path: Path) -> None:
    """Seen: after `--resume` of an older study (the command the console prints), `make report` wrote the
    report of the study created last and said "report of the last study run" of it."""
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    for name in ("older", "newer"):
        study = optuna.create_study(study_name=name, storage=storage)
        study.tell(study.ask(), 1.0)
        time.sleep(0.05)
    resumed = optuna.load_study(study_name="older", storage=storage)
    resumed.tell(resumed.ask(), 2.0)
    assert last_study(storage) == "older"
    # a trial asked and not yet told (a sweep still running, or one killed) counts from its start
    running = optuna.load_study(study_name="newer", storage=storage)
    time.sleep(0.05)
    running.ask()
    assert last_study(storage) == "newer"


def test_no_study_yet_is_a_one_line_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--out", str(tmp_path / "runs")]) == 2  # bad input, as the sweep exits for it
    assert "no study in" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


def test_the_last_study_line_names_the_command_as_it_was_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Seen: `make report` said "(name another: .venv/bin/python -m orchestrator.report NAME)".
    out = tmp_path / "runs"
    out.mkdir()
    optuna.create_study(study_name="demo", storage=f"sqlite:///{out / 'optuna.db'}")
    monkeypatch.setenv("MAKELEVEL", "1")
    main(["--out", str(out)])  # no MLflow store: exit 2 after the line that names the study
    assert "report of the last study run, 'demo' (name another: make report STUDY=NAME)" in (
        capsys.readouterr().err
    )
    monkeypatch.delenv("MAKELEVEL")
    main(["--out", str(out)])
    err = capsys.readouterr().err
    assert "(name another: " in err and "-m orchestrator.report NAME)" in err and "make " not in err
