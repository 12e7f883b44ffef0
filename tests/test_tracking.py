"""MLflow records: params under SGLang's names, and nothing lost while the tracking server is away."""

from __future__ import annotations

import socket
from dataclasses import replace
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from orchestrator.records import StageMetrics, TrialResult, TrialStatus
from orchestrator.spec import make_config
from orchestrator.tracking import Tracker, TrialRecord, flag_params


def test_flag_params_use_sglang_names() -> None:
    argv = (
        "python",
        "-m",
        "sglang.launch_server",
        "--mem-fraction-static",
        "0.85",
        "--enable-metrics",
        "--tp-size=8",
        "--sim-state-dir",
        "/tmp/x",
    )
    assert flag_params(argv) == {"mem_fraction_static": "0.85", "enable_metrics": "true", "tp_size": "8"}


def record(number: int) -> TrialRecord:
    stage = StageMetrics(8, 16, 16, 0, 2.0, 512.0, 8.0, 30.0, 60.0, 5.0, 9.0, 6.0, 2.5)
    result = TrialResult(
        config=make_config(0.85, 16, 16, 3, 1, 4),
        status=TrialStatus.OK,
        node_id="node-a",
        command=("python", "-m", "sglang.launch_server", "--mem-fraction-static", "0.85"),
        stages=(stage,),
        memory={"weights_gb": 0.1, "kv_cache_tokens": 12379562.0},
        log_tail="The server is fired up and ready to roll!\n",
        startup_s=70.0,
    )
    return TrialRecord(number=number, result=result, objective=512.0)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_trials_spooled_while_mlflow_is_down_are_written_later(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "2")
    good_uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = Tracker(good_uri, "spool", tmp_path / "spool")
    tracker.start("sweep", {}, {})
    assert tracker.log_trial(record(0)) is not None
    # The tracking server goes away.
    tracker.client = MlflowClient(tracking_uri=f"http://127.0.0.1:{closed_port()}")
    assert tracker.log_trial(record(1)) is None
    assert tracker.pending_spool() == 1
    # ... and comes back: the next write first flushes the spool, in order.
    tracker.client = MlflowClient(tracking_uri=good_uri)
    assert tracker.log_trial(record(2)) is not None
    assert tracker.pending_spool() == 0
    client = MlflowClient(tracking_uri=good_uri)
    exp = client.get_experiment_by_name("spool")
    assert exp is not None
    runs = [r for r in client.search_runs([exp.experiment_id]) if r.data.tags.get("kind") != "sweep"]
    assert sorted(r.data.tags["optuna_trial_number"] for r in runs) == ["0", "1", "2"]
    run = runs[0]
    assert run.data.params["mem_fraction_static"] == "0.85"
    assert run.data.metrics["output_tok_per_s"] == 512.0
    assert run.data.metrics["accept_length"] == 2.5
    assert {a.path for a in client.list_artifacts(run.info.run_id)} >= {"server.log", "launch_command.sh"}


def test_the_stage_interval_goes_to_mlflow_as_two_metrics(tmp_path: Path) -> None:
    base = record(0)
    stage = StageMetrics(
        8, 16, 16, 0, 21.0, 512.0, 8.0, 30.0, 60.0, 5.0, 9.0, 6.0, 2.5,
        window_s=18.5, steady=True, output_tok_per_s_ci95=(498.0, 526.0),
    )  # fmt: skip
    rec = TrialRecord(number=0, result=replace(base.result, stages=(stage,)), objective=512.0)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = Tracker(uri, "ci", tmp_path / "spool")
    tracker.start("sweep", {}, {})
    assert tracker.log_trial(rec) is not None
    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name("ci")
    assert exp is not None
    run = next(r for r in client.search_runs([exp.experiment_id]) if r.data.tags.get("kind") != "sweep")
    m = run.data.metrics
    assert (m["output_tok_per_s_ci95_low"], m["output_tok_per_s"], m["output_tok_per_s_ci95_high"]) == (
        498.0, 512.0, 526.0,
    )  # fmt: skip
    assert m["stage_window_s"] == 18.5
