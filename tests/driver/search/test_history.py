"""Warm start: a new study learns an earlier study's OOM boundary, best configurations and memory."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from orchestrator.driver.memory.learned import MemoryModel
from orchestrator.driver.search.history import find_history, seed_study
from orchestrator.driver.store.tracking import Tracker
from orchestrator.driver.store.trial_attrs import TrialAttr
from orchestrator.engines.sglang.logparse import parse_log
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

ROOT = Path(__file__).resolve().parents[3]
OK_LOG = ROOT / "tests" / "fixtures" / "sglang" / "0.5.17" / "specsweep-h200" / "ok-accept.log"


@pytest.mark.slow  # seconds of real time (a simulated server, a sweep or a wait); left out of `make unit`
def test_earlier_sweep_seeds_a_new_study(tmp_path: Path) -> None:
    spec = load_spec(ROOT / "trials" / "h200.yaml")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    old = Tracker(uri, "h200-old", tmp_path / "spool")
    old.start(
        "sweep",
        {"model_path": spec.model.path, "draft_model_path": spec.model.draft_path, "gpus_per_node": "1"},
        {},
    )
    memory = parse_log(OK_LOG.read_text()).memory
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
        pruned[0].params["mem_fraction_static"] == 0.99
        and pruned[0].user_attrs[TrialAttr.WARM_START_FROM] == "h200-old"
    )
    waiting = [t for t in study.trials if t.state == optuna.trial.TrialState.WAITING]
    assert len(waiting) == 1 and waiting[0].user_attrs["known_good"]
    assert model.ready  # the memory model knows the weights and KV before any launch
    assert model.predict(make_config(0.001, 16, 16, 3, 1, 4)).skip


def test_a_sweep_on_one_gpu_teaches_the_memory_model_of_a_two_gpu_sweep(tmp_path: Path) -> None:
    """Same model, nodes of another GPU count: only the memory figures carry over, converted to the new
    tp; the KV boundary of one GPU (0.001 leaves no pool) is not an OOM at tp 2, nor is a speed."""
    one = load_spec(ROOT / "trials" / "h200.yaml")
    spec = one.model_copy(update={"node": one.node.model_copy(update={"gpus": 2})})
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    old = Tracker(uri, "h200-tp1", tmp_path / "spool")
    old.start(
        "sweep",
        {"model_path": spec.model.path, "draft_model_path": spec.model.draft_path, "gpus_per_node": "1"},
        {},
    )
    real = ROOT / "tests" / "fixtures" / "sglang" / "0.5.17"
    memory = parse_log((real / "ok.log").read_text()).memory
    stage = StageMetrics(8, 16, 16, 0, 1.0, 3400.0, 16.0, 100, 130, 2, 25, 3, 4.0)
    good = TrialResult(
        make_config(0.85, 16, 16, 3, 1, 4), TrialStatus.OK, "n", ("x",), stages=(stage,), memory=memory
    )
    kv_oom = TrialResult(
        make_config(0.001, 16, 16, 3, 1, 4),
        TrialStatus.OOM,
        "n",
        ("x",),
        failure=Failure(FailureStage.KV_ALLOCATION, FailureKind.OOM, "Loaded weights leave no GPU memory"),
        memory=MemoryAccount(avail_at_start_gb=139.09, weights_gb=0.10, draft_weights_gb=0.05),
    )
    old.log_trial(TrialRecord(0, good, 3400.0))
    old.log_trial(TrialRecord(1, kv_oom, None))

    past = find_history(uri, spec, exclude="h200-tp2")
    assert {p.gpus for p in past} == {1}
    study = optuna.create_study(direction="maximize")
    model = MemoryModel(tp=2, kv_heads=8)
    counts = seed_study(study, spec.search, past, model)
    assert counts == {"infeasible": 0, "feasible": 0, "enqueued": 0, "memory_points": 1}
    assert not study.trials
    tp2 = parse_log((real / "tp2-ok.log").read_text()).memory.kv_cache_tokens
    predicted = model.predict(make_config(0.85, 16, 16, 3, 1, 4)).kv_tokens
    assert tp2 and predicted and abs(predicted - tp2) < 0.05 * tp2
    assert not model.predict(make_config(0.001, 16, 16, 3, 1, 4)).skip
