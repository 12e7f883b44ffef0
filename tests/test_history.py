"""Warm start: a new study learns an earlier study's OOM boundary, best configurations and memory."""

from __future__ import annotations

from pathlib import Path

import optuna

from orchestrator.history import HISTORY_ATTR, find_history, seed_study
from orchestrator.memory_model import MemoryModel
from orchestrator.records import Failure, FailureKind, FailureStage, StageMetrics, TrialResult, TrialStatus
from orchestrator.server.logparse import parse_log
from orchestrator.spec import load_spec, make_config
from orchestrator.tracking import Tracker, TrialRecord

ROOT = Path(__file__).resolve().parents[1]
OK_LOG = ROOT / "tests" / "fixtures" / "sglang" / "0.5.17" / "specsweep-h200" / "ok-accept.log"


def test_earlier_sweep_seeds_a_new_study(tmp_path: Path) -> None:
    spec = load_spec(ROOT / "trials" / "h200.yaml")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    old = Tracker(uri, "h200-old", tmp_path / "spool")
    old.start(
        "sweep",
        {"model_path": spec.model.path, "draft_model_path": spec.model.draft_path, "gpus_per_node": "1"},
        {},
    )
    memory = parse_log(OK_LOG.read_text()).memory.as_metrics()
    stage = StageMetrics(8, 16, 16, 0, 1.0, 3400.0, 16.0, 100, 130, 2, 25, 3, 4.0)
    good = TrialResult(
        make_config(0.85, 16, 16, 3, 1, 4), TrialStatus.OK, "n", ("x",), stages=(stage,), memory=memory
    )
    oom = TrialResult(
        make_config(0.99, 512, 512, 3, 1, 4),
        TrialStatus.OOM,
        "n",
        ("x",),
        failure=Failure(FailureStage.TARGET_GRAPH_CAPTURE, FailureKind.OOM, "Capture cuda graph failed"),
    )
    old.log_trial(TrialRecord(0, good, 3400.0))
    old.log_trial(TrialRecord(1, oom, None))
    # An unrelated study (another model) is ignored.
    other = Tracker(uri, "other-model", tmp_path / "spool2")
    other.start("sweep", {"model_path": "/elsewhere", "draft_model_path": "/d", "gpus_per_node": "1"}, {})
    other.log_trial(TrialRecord(0, good, 1.0))

    past = find_history(uri, spec, exclude="h200-new")
    assert {p.experiment for p in past} == {"h200-old"}
    study = optuna.create_study(direction="maximize")
    model = MemoryModel()
    counts = seed_study(study, spec.search, past, model)
    assert counts == {"infeasible": 1, "feasible": 1, "enqueued": 1, "memory_points": 1}
    pruned = [t for t in study.trials if t.state == optuna.trial.TrialState.PRUNED]
    assert len(pruned) == 1 and pruned[0].constraints == {"oom": 1.0}
    assert (
        pruned[0].params["mem_fraction_static"] == 0.99 and pruned[0].user_attrs[HISTORY_ATTR] == "h200-old"
    )
    waiting = [t for t in study.trials if t.state == optuna.trial.TrialState.WAITING]
    assert len(waiting) == 1 and waiting[0].user_attrs["known_good"]
    assert model.ready  # the memory model knows the weights and KV before any launch
    assert model.predict(make_config(0.001, 16, 16, 3, 1, 4)).skip
