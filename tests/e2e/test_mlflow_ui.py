"""What the README tells users to open after a sweep: `mlflow ui` and `optuna-dashboard` on the sweep's
stores, started as real servers and read through their HTTP APIs and a headless browser."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import pytest
import yaml
from e2ehelp import GOOD, HEADLESS, KV_OOM, require_chromium

from orchestrator.driver.store.tracking import runs_url

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
SCREENSHOT = ROOT / "tests" / "artifacts" / "mlflow-compare.png"
SEARCH_PARAMS = (
    "mem_fraction_static",
    "cuda_graph_max_bs",
    "max_running_requests",
    "speculative_num_steps",
    "speculative_eagle_topk",
    "speculative_num_draft_tokens",
)
# What SGLang prints when the KV cache does not fit: 0.5.17's wording, and the older one.
KV_OOM_LINE = re.compile(r"leave no GPU memory for the KV cache|Not enough memory")
# No telemetry from the servers or the sweep: the test must not depend on (or talk to) the network.
ENV = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "true"}
# The MLflow server's background job runner (GenAI evaluation jobs, eight more processes) has nothing to
# do with the runs it serves; off, the server starts faster on a small CI machine.
UI_ENV = {**ENV, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def demo_runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One small demo sweep (baseline, a good configuration, a KV-cache OOM); returns its `--out`."""
    work = tmp_path_factory.mktemp("ui")
    spec = yaml.safe_load((ROOT / "trials" / "demo.yaml").read_text())
    spec["known_good"] = [GOOD, KV_OOM]
    spec["memory"] = {"prior": False}  # the KV OOM must launch (the memory prior would refuse it)
    spec["budget"]["trials"] = 2  # the baseline runs on top of the budget
    spec["workload"].update(num_prompts=8, concurrency=[8])  # the UI needs the records, not long runs
    (work / "spec.yaml").write_text(yaml.safe_dump(spec))
    out = work / "runs"
    # Run from the scratch folder: anything MLflow writes relative to the working directory lands there.
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "orchestrator.sweep",
            str(work / "spec.yaml"),
            "--out",
            str(out),
            "--no-dashboard",
        ],
        cwd=work,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def serving(
    argv: list[str], probe_url: str, cwd: Path, env: dict[str, str] = ENV, timeout_s: float = 120.0
) -> Iterator[None]:
    """Start a server in its own process group, wait until `probe_url` answers 200, and always stop the
    whole group (the MLflow UI runs several worker processes) when the block ends."""
    log_path = cwd / f"{Path(argv[0]).name}.log"
    with log_path.open("wb") as log_file:
        proc = subprocess.Popen(
            argv, cwd=cwd, env=env, stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if proc.poll() is not None:
                pytest.fail(f"{argv[0]} exited with {proc.returncode}:\n{log_path.read_text()[-3000:]}")
            if time.monotonic() > deadline:
                pytest.fail(f"{argv[0]} did not answer in {timeout_s:.0f} s:\n{log_path.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(probe_url, timeout=3) as answer:
                    if answer.status == 200:
                        break
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.3)
        yield
    finally:
        stop_group(proc)


def stop_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        proc.poll()
        try:
            os.killpg(proc.pid, 0)  # anyone of the group left?
        except ProcessLookupError:
            return
        time.sleep(0.2)
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=10)


def get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=30) as answer:
        body: bytes = answer.read()
    return body


def get_json(url: str) -> Any:
    return json.loads(get(url))


def post_json(url: str, body: dict[str, Any]) -> Any:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        return json.loads(answer.read())


@pytest.fixture(scope="module")
def mlflow_ui(demo_runs: Path) -> Iterator[str]:
    """`mlflow ui` exactly as the README prints it (plus a free port); yields its base URL."""
    port = free_port()
    argv = [
        str(BIN / "mlflow"),
        "ui",
        "--backend-store-uri",
        f"sqlite:///{demo_runs / 'mlflow.db'}",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]
    base = f"http://127.0.0.1:{port}"
    with serving(argv, f"{base}/health", cwd=demo_runs.parent, env=UI_ENV):
        yield base


def kv(items: list[dict[str, Any]]) -> dict[str, Any]:
    return {item["key"]: item["value"] for item in items}


def trial_runs(base: str) -> tuple[str, list[dict[str, Any]]]:
    """The experiment id and the trial runs (children of the one sweep run), as the UI's API serves them."""
    exp = get_json(f"{base}/api/2.0/mlflow/experiments/get-by-name?{urlencode({'experiment_name': 'demo'})}")
    exp_id = exp["experiment"]["experiment_id"]
    search = f"{base}/api/2.0/mlflow/runs/search"
    parents = post_json(search, {"experiment_ids": [exp_id], "filter": "tags.kind = 'sweep'"})["runs"]
    assert len(parents) == 1
    parent_id = parents[0]["info"]["run_id"]
    children = post_json(
        search,
        {
            "experiment_ids": [exp_id],
            "filter": f"tags.mlflow.parentRunId = '{parent_id}'",
            "max_results": 100,
        },
    )["runs"]
    return exp_id, children


def test_mlflow_ui_serves_trials_params_metrics_and_artifacts(mlflow_ui: str, demo_runs: Path) -> None:
    _, runs = trial_runs(mlflow_ui)
    by_status: dict[str, list[dict[str, Any]]] = {}
    for run in runs:
        by_status.setdefault(kv(run["data"]["tags"])["status"], []).append(run)
    seen = {
        kv(r["data"]["tags"])["optuna_trial_number"]: kv(r["data"]["tags"]).get("failure_message", "ok")
        for r in runs
    }
    # the baseline and the good configuration run, the low fraction runs out of KV-cache memory
    assert len(by_status.get("ok", [])) == 2 and len(by_status.get("oom", [])) == 1 and len(runs) == 3, seen

    for run in runs:
        tags, params = kv(run["data"]["tags"]), kv(run["data"]["params"])
        metrics = kv(run["data"].get("metrics", []))
        ok = tags["status"] == "ok"
        assert run["info"]["status"] == ("FINISHED" if ok else "FAILED")
        assert run["info"]["run_name"].startswith(f"trial-{tags['optuna_trial_number']} {tags['status']}")
        # SGLang's own flag names, the values it was launched with
        assert {"mem_fraction_static", "cuda_graph_max_bs", "max_running_requests", "tp_size"} <= set(params)
        assert params["tp_size"] == "8"
        speculative = params["speculative_algorithm"] != "none"
        if speculative:
            assert set(SEARCH_PARAMS) <= set(params)
            assert params["speculative_algorithm"] == "EAGLE3"
        if ok:
            for key in ("output_tok_per_s", "ttft_p50_ms", "ttft_p99_ms", "itl_p99_ms", "kv_cache_tokens"):
                assert metrics[key] > 0, key
            if speculative:
                assert metrics["accept_length"] > 1.2

        # next to the sweep's database, not in whatever folder the sweep was started from
        assert run["info"]["artifact_uri"].startswith((demo_runs / "mlartifacts").as_uri())
        artifacts = get_json(f"{mlflow_ui}/api/2.0/mlflow/artifacts/list?run_id={run['info']['run_id']}")
        names = {f["path"] for f in artifacts["files"]}
        assert {"server.log", "launch_command.sh", "result.json"} <= names

        def artifact(path: str, run_id: str = run["info"]["run_id"]) -> str:
            # The endpoint the UI's artifact viewer reads a run's files through.
            return get(f"{mlflow_ui}/get-artifact?{urlencode({'path': path, 'run_uuid': run_id})}").decode()

        log = artifact("server.log")
        assert "Load weight end. elapsed=" in log
        command = artifact("launch_command.sh")
        assert command.startswith("#!/bin/sh\nexec ")
        # one flag and its value per line
        assert f"\n  --mem-fraction-static {params['mem_fraction_static']} \\\n" in command
        if tags["status"] == "oom":
            assert params["mem_fraction_static"] == "0.7"
            assert KV_OOM_LINE.search(log), log[-2000:]
            assert tags["failure_stage"] == "kv_allocation"
        else:
            assert "The server is fired up and ready to roll!" in log


def run_chromium(binary: str, profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    flags = [
        *HEADLESS,
        # Only the local server answers: the UI must draw from what it serves itself.
        "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
        f"--user-data-dir={profile}",
        "--window-size=1600,1400",
        # Virtual time stands still while a request is pending, so the page is drawn from full data.
        "--virtual-time-budget=20000",
    ]
    return subprocess.run([binary, *flags, *args], capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.browser
def test_mlflow_compare_view_draws_the_trials(mlflow_ui: str, tmp_path: Path) -> None:
    binary = require_chromium()
    exp_id, runs = trial_runs(mlflow_ui)
    ids = [r["info"]["run_id"] for r in runs]
    # The route MLflow's own "Compare" button opens (Routes.getCompareRunPageRoute in its JS bundle).
    url = (
        f"{mlflow_ui}/#/compare-runs?runs={quote(json.dumps(ids))}&experiments={quote(json.dumps([exp_id]))}"
    )
    SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
    SCREENSHOT.unlink(missing_ok=True)
    # One load of the page gives both: the DOM on stdout and the screenshot.
    done = run_chromium(binary, tmp_path / "profile", f"--screenshot={SCREENSHOT}", "--dump-dom", url)
    assert done.returncode == 0, done.stderr[-2000:]
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", done.stdout))
    assert f"Comparing {len(ids)} Runs" in text, text[-3000:]
    for run in runs:
        assert run["info"]["run_name"] in text
    # The params table lists every flag; the metrics table draws only its first rows (a scrolled list).
    for name in ("mem_fraction_static", "cuda_graph_max_bs", "speculative_num_draft_tokens", "accept_length"):
        assert name in text, name
    assert "Parallel Coordinates Plot" in text
    assert "server.log" in text and "launch_command.sh" in text
    assert SCREENSHOT.stat().st_size > 50_000  # a blank or spinner-only page compresses to a few kB


@pytest.mark.browser
def test_the_printed_link_opens_the_training_runs(mlflow_ui: str, demo_runs: Path, tmp_path: Path) -> None:
    """MLflow 3 opens an experiment on its GenAI overview ("Traces 0"); the link the sweep prints and
    the README gives opens the runs, where the sweep and its trials are."""
    binary = require_chromium()
    exp_id, _ = trial_runs(mlflow_ui)
    exp = get_json(f"{mlflow_ui}/api/2.0/mlflow/experiments/get?experiment_id={exp_id}")["experiment"]
    tags = kv(exp.get("tags", []))
    assert tags["mlflow.experimentKind"] == "custom_model_development"
    assert tags["mlflow.experiment.primaryMetric.name"] == "output_tok_per_s"
    done = run_chromium(binary, tmp_path / "profile", "--dump-dom", runs_url(mlflow_ui, exp_id))
    assert done.returncode == 0, done.stderr[-2000:]
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", done.stdout))
    assert "Model training" in text and "matching runs" in text and "sweep 20" in text, text[-3000:]
    assert "No data available" not in text


def test_optuna_dashboard_lists_the_study(demo_runs: Path) -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    argv = [
        str(BIN / "optuna-dashboard"),
        f"sqlite:///{demo_runs / 'optuna.db'}",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]
    with serving(argv, f"{base}/api/meta", cwd=demo_runs.parent):
        studies = get_json(f"{base}/api/studies")["study_summaries"]
        assert [s["study_name"] for s in studies] == ["demo"]
        assert studies[0]["directions"] == ["maximize"]
        study = get_json(f"{base}/api/studies/{studies[0]['study_id']}")
        trials = study["trials"]
        assert len(trials) == 3
        states = sorted(t["state"] for t in trials)
        assert states == ["Complete", "Complete", "Pruned"]
        pruned = next(t for t in trials if t["state"] == "Pruned")
        params = {p["name"]: p["param_external_value"] for p in pruned["params"]}
        assert float(params["mem_fraction_static"]) == pytest.approx(0.70)
        assert kv(pruned["user_attrs"])["status"] == "oom"
        page = get(f"{base}/dashboard").decode()
        assert "<script" in page  # the single-page app the README sends users to
