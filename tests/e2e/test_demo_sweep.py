"""The README's first command, end to end on the simulated node, checked in MLflow and Optuna."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import optuna
import pytest
from e2ehelp import GOOD, KV_OOM, sweep
from mlflow.tracking import MlflowClient

ROOT = Path(__file__).resolve().parents[2]


SECRET = "sk-e2e-5d1c0a77"


@pytest.mark.slow
def test_demo_sweep_records_every_trial(tmp_path: Path, demo_spec: Any) -> None:
    # A KV OOM among the known-good ones: its failure message quotes the log. The server also gets an
    # API key, which must reach it and nothing we keep.
    spec = demo_spec(
        known_good=[GOOD, KV_OOM],
        memory={"prior": False},  # the KV OOM must launch: the memory prior would refuse it
        budget__trials=4,
        server__flags=["--trust-remote-code", "--skip-tokenizer-init", f"--api-key={SECRET}"],
    )
    out = tmp_path / "runs"
    proc = sweep(spec, out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    leaks = [p for p in out.rglob("*") if p.is_file() and SECRET.encode() in p.read_bytes()]
    assert not leaks, leaks
    assert "mlflow ui --backend-store-uri sqlite:///" in proc.stdout
    assert "best: trial" in proc.stdout

    study = optuna.load_study(study_name="demo", storage=f"sqlite:///{out / 'optuna.db'}")
    trials = study.get_trials()
    # The baseline is a reference: it runs on top of the budget of 4.
    launched = [t for t in trials if t.user_attrs.get("status") != "predicted_oom"]
    assert len([t for t in launched if not t.user_attrs.get("baseline")]) == 4 and len(launched) == 5
    by_status = {t.user_attrs["status"]: t for t in trials}
    # The baseline ran first, then the known-good configurations.
    assert trials[0].user_attrs.get("baseline") is True
    assert "ok" in by_status
    # The known-good KV OOM (with the prior off, a proposal may OOM too: the known-good one is checked)
    oom = next(t for t in trials if t.user_attrs["status"] == "oom" and t.user_attrs.get("known_good"))
    assert oom.state == optuna.trial.TrialState.PRUNED
    assert oom.constraints == {"oom": 1.0}
    assert oom.params["mem_fraction_static"] == pytest.approx(0.70)
    ok = [t for t in trials if t.user_attrs["status"] == "ok"]
    assert ok and all(
        t.state == optuna.trial.TrialState.COMPLETE and t.constraints == {"oom": 0.0, "sla": 0.0} for t in ok
    )

    client = MlflowClient(tracking_uri=f"sqlite:///{out / 'mlflow.db'}")
    exp = client.get_experiment_by_name("demo")
    assert exp is not None
    runs = client.search_runs([exp.experiment_id])
    parents = [r for r in runs if r.data.tags.get("kind") == "sweep"]
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parents[0].info.run_id]
    assert len(parents) == 1 and len(children) == len(trials)
    statuses = {r.data.tags["status"] for r in children}
    assert {"ok", "oom"} <= statuses
    for run in children:
        params = run.data.params
        assert float(params["mem_fraction_static"]) > 0
        artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
        if run.data.tags["status"] == "predicted_oom":
            # never launched: no server log, no command, and no flag it was never given
            assert artifacts == {"result.json"} and "tp_size" not in params
            assert "(not launched)" in run.data.tags["mlflow.note.content"]
            continue
        assert params["tp_size"] == "8"
        assert {"server.log", "launch_command.sh", "result.json"} <= artifacts
        if run.data.tags["status"] == "ok":
            m = run.data.metrics
            for key in (
                "output_tok_per_s",
                "ttft_p50_ms",
                "ttft_p99_ms",
                "itl_p50_ms",
                "itl_p99_ms",
                "weights_gb",
                "kv_cache_tokens",
                "startup_s",
            ):
                assert m[key] > 0, key
            if run.data.tags["baseline"] == "false":
                assert m["accept_length"] > 1.2
                assert "speedup_vs_baseline" in m
    oom_run = next(
        r
        for r in children
        if r.data.tags["status"] == "oom"
        and float(r.data.params["mem_fraction_static"]) == pytest.approx(0.70)
    )
    assert oom_run.data.tags["failure_stage"] == "kv_allocation"
    assert "KV cache" in oom_run.data.tags["diagnosis"]

    best = json.loads((out / "demo" / "best.json").read_text())
    # The interpreter the node ran the trial with, not whatever `python` is on PATH
    assert best["command"][:3] == ["python3", "-m", "sglang.launch_server"]
    assert "--speculative-num-draft-tokens" in best["command"]
    # Four trials cannot spare the demo's confirmation launches: it says so, and still says how sure it is.
    assert "no confirmation launches" in proc.stderr
    assert best["launches"] and best["median_tok_per_s"] > 0 and best["trial"] in best["launches"]
    assert f"confidence: {best['verdict']['statement']}" in proc.stdout
    assert "interval" not in best["verdict"]["statement"]  # one launch each: none is knowable
    assert (out / "demo" / "best_command.sh").read_text().startswith("#!/bin/sh")


@pytest.mark.slow
def test_resume_continues_without_repeating(tmp_path: Path, demo_spec: Any) -> None:
    spec = demo_spec(known_good=[GOOD], budget__trials=2, budget__baseline=False)
    out = tmp_path / "runs"
    assert sweep(spec, out).returncode == 0
    proc = sweep(spec, out, "--resume", "--trials", "4")
    assert proc.returncode == 0, proc.stderr[-3000:]
    study = optuna.load_study(study_name="demo", storage=f"sqlite:///{out / 'optuna.db'}")
    # A configuration measured before the resume and proposed again is answered from its record
    # (`repeat_of`), as within one run: it is not launched and has no MLflow run of its own.
    launched = [
        t
        for t in study.get_trials()
        if t.user_attrs.get("status") != "predicted_oom" and "repeat_of" not in t.user_attrs
    ]
    assert len(launched) == 4
    assert len({t.number for t in launched}) == 4
    assert len({str(sorted(t.params.items())) for t in launched}) == 4
    client = MlflowClient(tracking_uri=f"sqlite:///{out / 'mlflow.db'}")
    exp = client.get_experiment_by_name("demo")
    assert exp is not None
    children = [r for r in client.search_runs([exp.experiment_id]) if r.data.tags.get("kind") != "sweep"]
    numbers = sorted(int(r.data.tags["optuna_trial_number"]) for r in children)
    assert numbers == sorted(t.number for t in study.get_trials() if "repeat_of" not in t.user_attrs)
    # The closing table lists the first invocation's trials too, and counts them.
    table = proc.stdout[proc.stdout.index("configuration\n") :]
    assert sorted(int(n) for n in re.findall(r"^\s*(\d+) [a-z_]+ ", table, re.M)) == numbers
    assert f"{len(numbers)} trials: " in table


def test_bad_spec_fails_before_anything_starts(tmp_path: Path, demo_spec: Any) -> None:
    spec = demo_spec(search__mem_fraction_static={"low": 0.5, "high": 1.5})
    proc = sweep(spec, tmp_path / "runs")
    assert proc.returncode == 2
    assert "search.mem_fraction_static" in proc.stderr
    assert not (tmp_path / "runs").exists()
