"""MLflow records: params under SGLang's names, and nothing lost while the tracking server is away."""

from __future__ import annotations

import socket
from dataclasses import replace
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from orchestrator.cli import resolve_profile
from orchestrator.driver.store.tracking import Tracker
from orchestrator.mlflow_schema import LaunchParams
from orchestrator.node.backends import SimulatedNode
from orchestrator.records import (
    Failure,
    FailureKind,
    FailureStage,
    MemoryAccount,
    StageMetrics,
    TrialRecord,
    TrialResult,
    TrialStatus,
)
from orchestrator.spec.search import make_config
from orchestrator.spec.sweep_spec import load_spec

DEMO = Path(__file__).resolve().parents[3] / "trials" / "demo.yaml"


def test_a_simulated_trial_logs_no_simulator_flag_as_a_param(tmp_path: Path) -> None:
    spec = load_spec(DEMO)
    # A simulated sweep may pass the simulator its own flags; they say nothing about SGLang's settings.
    server = spec.server.model_copy(update={"flags": [*spec.server.flags, "--sim-startup-time-scale", "0"]})
    spec = spec.model_copy(update={"server": server})
    config = make_config(0.85, 128, 48, 3, 1, 4)
    node = SimulatedNode(spec, f"params-{tmp_path.name}", resolve_profile(spec) or {})
    plan = node.plan(config, 30000, tmp_path)
    assert any(arg.startswith("--sim-") for arg in plan.argv)
    result = TrialResult(config, TrialStatus.OK, node.node_id, plan.argv, dataset=spec.workload.dataset_label)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = Tracker(uri, "sim", tmp_path / "spool", launch=LaunchParams.from_spec(spec))
    tracker.start("sweep", {}, {})
    run_id = tracker.log_trial(TrialRecord(number=0, result=result, objective=None))
    assert run_id is not None
    params = MlflowClient(tracking_uri=uri).get_run(run_id).data.params
    assert params["mem_fraction_static"] == "0.85"
    assert not [name for name in params if name.startswith("sim_")]
    # the spec's share: SGLang's names, the values the launch command has
    assert params["tp_size"] == "8" and params["model_path"] == spec.model.path
    assert params["speculative_algorithm"] == "EAGLE3" and params["speculative_adaptive"] == "off"
    assert params["speculative_draft_model_path"] == spec.model.draft_path
    assert params["trust_remote_code"] == "true" and params["backend"] == "simulated"
    assert "host" not in params and "port" not in params


def record(number: int) -> TrialRecord:
    stage = StageMetrics(8, 16, 16, 0, 2.0, 512.0, 8.0, 30.0, 60.0, 5.0, 9.0, 6.0, 2.5)
    result = TrialResult(
        config=make_config(0.85, 16, 16, 3, 1, 4),
        status=TrialStatus.OK,
        node_id="node-a",
        command=("python", "-m", "sglang.launch_server", "--mem-fraction-static", "0.85"),
        stages=(stage,),
        memory=MemoryAccount(weights_gb=0.1, kv_cache_tokens=12379562),
        log_text="The server is fired up and ready to roll!\n",
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


@pytest.mark.slow  # seconds of real time (a simulated server, a sweep or a wait); left out of `make unit`
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


def test_predicted_oom_run_holds_what_is_true_and_the_experiment_opens_on_runs(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = Tracker(uri, "predicted", tmp_path / "spool")
    tracker.start("sweep", {}, {})
    skipped = TrialResult(
        config=make_config(0.94, 512, 48, 3, 1, 4),
        status=TrialStatus.PREDICTED_OOM,
        node_id="",
        command=(),
        failure=Failure(
            FailureStage.DRAFT_GRAPH_CAPTURE,
            FailureKind.OOM,
            "predicted: CUDA graphs need about 5.28 GB, 4.77 GB left at fraction 0.940",
        ),
        predicted={"graph_need_gb": 5.28, "graph_room_gb": 4.77, "kv_tokens": 380000.0},
    )
    run_id = tracker.log_trial(TrialRecord(number=3, result=skipped, objective=None))
    assert run_id is not None
    client = MlflowClient(tracking_uri=uri)
    # never launched: no log and no command, only the record and the predicted figures with the reason
    assert {a.path for a in client.list_artifacts(run_id)} == {"result.json"}
    run = client.get_run(run_id)
    assert run.data.metrics["predicted_graph_need_gb"] == 5.28
    assert run.data.metrics["predicted_graph_room_gb"] == 4.77
    note = run.data.tags["mlflow.note.content"]
    assert "not launched" in note and "5.28 GB" in note and "graph_need_gb 5.28" in note
    # MLflow 3's UI opens on the training runs and charts output_tok_per_s first
    exp = client.get_experiment_by_name("predicted")
    assert exp is not None
    assert exp.tags["mlflow.experimentKind"] == "custom_model_development"
    assert exp.tags["mlflow.experiment.primaryMetric.name"] == "output_tok_per_s"


def test_an_existing_experiment_gets_the_tags(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    MlflowClient(tracking_uri=uri).create_experiment("old")
    Tracker(uri, "old", tmp_path / "spool").start("sweep", {}, {})
    exp = MlflowClient(tracking_uri=uri).get_experiment_by_name("old")
    assert exp is not None and exp.tags["mlflow.experimentKind"] == "custom_model_development"


def test_a_trial_run_spans_its_launch_on_the_node(tmp_path: Path) -> None:
    """Seen in the MLflow UI: every trial run's Duration read about 30 ms (the run was opened and closed
    as the driver wrote it), while the launch took 7 s on its node. A run spans the launch it records."""
    result = replace(record(0).result, started_unix=1_796_631_408.9, finished_unix=1_796_631_512.3)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = Tracker(uri, "span", tmp_path / "spool")
    tracker.start("sweep", {}, {})
    run_id = tracker.log_trial(TrialRecord(number=0, result=result, objective=512.0))
    assert run_id is not None
    info = MlflowClient(tracking_uri=uri).get_run(run_id).info
    assert info.start_time == 1_796_631_408_900 and info.end_time == 1_796_631_512_300
    # a configuration never launched has no span of its own: written when it was judged
    never = replace(record(1).result, status=TrialStatus.PREDICTED_OOM, started_unix=0.0, finished_unix=0.0)
    other = tracker.log_trial(TrialRecord(number=1, result=never, objective=None))
    assert other is not None
    assert MlflowClient(tracking_uri=uri).get_run(other).info.start_time > 1_796_631_512_300
