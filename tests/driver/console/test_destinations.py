"""Destinations are checked before anything is created, and a start that failed leaves no study in the way."""

from __future__ import annotations

import http.server
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator import cli
from orchestrator.driver.console.destinations import MLFLOW_HTTP_ENV, check_tracking
from orchestrator.driver.console.study_guard import check_study
from orchestrator.driver.store.study_lock import DriverLease
from orchestrator.driver.store.tracking import ui_hint
from tests.driver.console.test_study_guard import DEMO, make_study, storage_url


@pytest.mark.slow  # seconds of real time (a simulated server, a sweep or a wait); left out of `make unit`
def test_a_study_with_no_trial_does_not_block_a_fresh_start(tmp_path: Path) -> None:
    # Seen: an unreachable --tracking-uri left study 'demo' with 0 trials, and the next run was told to
    # --resume a study that never ran.
    out = tmp_path / "runs"
    make_study(out, finished=0)
    assert check_study(storage_url(out), "demo", False, 12, out / "demo") is None


def test_an_empty_study_being_started_by_a_live_driver_still_blocks(tmp_path: Path) -> None:
    out = tmp_path / "runs"
    lease = DriverLease(make_study(out, finished=0))
    lease.acquire()
    try:
        with pytest.raises(Exception, match="being started by another driver"):
            check_study(storage_url(out), "demo", False, 12, out / "demo")
    finally:
        lease.release()


def test_an_unreachable_tracking_server_creates_no_study(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "runs"
    assert cli.main([str(DEMO), "--out", str(out), "--tracking-uri", "http://127.0.0.1:9"]) == 2
    assert "--tracking-uri: no MLflow server answers" in capsys.readouterr().err
    assert not out.exists()


@pytest.fixture
def answering_server() -> Iterator[str]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"OK")

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()


def test_a_tracking_server_that_answers_passes_and_mlflows_retries_are_bounded(
    answering_server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key in MLFLOW_HTTP_ENV:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "30")  # the user's own setting wins
    check_tracking(answering_server, tmp_path)
    from mlflow.environment_variables import MLFLOW_HTTP_REQUEST_MAX_RETRIES, MLFLOW_HTTP_REQUEST_TIMEOUT

    assert MLFLOW_HTTP_REQUEST_MAX_RETRIES.get() == int(MLFLOW_HTTP_ENV["MLFLOW_HTTP_REQUEST_MAX_RETRIES"])
    assert MLFLOW_HTTP_REQUEST_TIMEOUT.get() == 30
    assert os.environ["MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR"] == "1"


def test_the_last_line_opens_the_store_the_sweep_wrote() -> None:
    # Seen: with --tracking-uri sqlite:///elsewhere.db the last line sent the user to `make mlflow-ui`,
    # which opens runs/mlflow.db: another study.
    custom = ui_hint("sqlite:////data/elsewhere.db", "3")
    assert "ui --backend-store-uri sqlite:////data/elsewhere.db" in custom
    assert "make mlflow-ui" not in custom and "#/experiments/3" in custom
    assert ui_hint("http://mlflow:5000", "7").endswith(
        "http://mlflow:5000/#/experiments/7?workflowType=machine_learning"
    )
