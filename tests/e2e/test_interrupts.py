"""How a sweep stops: SIGTERM, a time budget, a node with no GPU. Each through the real CLI."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import optuna
import psutil
import pytest
from optuna.trial import TrialState

from orchestrator.driver.attrs import StudyAttr

ROOT = Path(__file__).resolve().parents[2]
LONG = {"workload__num_prompts": 64, "workload__output_len": 256, "workload__concurrency": [2]}


def cli(spec: Path, out: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "orchestrator.sweep",
        str(spec),
        "--out",
        str(out),
        "--no-dashboard",
        *extra,
    ]


def trials(out: Path) -> list[optuna.trial.FrozenTrial]:
    try:
        return optuna.load_study(study_name="demo", storage=f"sqlite:///{out / 'optuna.db'}").trials
    except Exception:  # not created yet
        return []


def servers_of(root: Path) -> list[psutil.Process]:
    """Simulated servers started for this test (their profile file lies under `root`)."""
    found = []
    for p in psutil.process_iter(["cmdline"]):
        cmd = " ".join(p.info["cmdline"] or [])
        if "orchestrator.sim.server" in cmd and str(root) in cmd:
            found.append(p)
    return found


def launched_configs(ts: list[optuna.trial.FrozenTrial], closed: set[int]) -> list[tuple[Any, ...]]:
    return [
        tuple(sorted(t.params.items()))
        for t in ts
        if t.state.is_finished()
        and t.number not in closed
        and "closed" not in t.user_attrs
        and "repeat_of" not in t.user_attrs
        and t.user_attrs.get("status") not in ("predicted_oom", "lost")
    ]


@pytest.mark.slow
def test_sigterm_stops_like_ctrl_c_and_resume_relaunches_nothing(tmp_path: Path, demo_spec: Any) -> None:
    spec = demo_spec(known_good=[], budget__trials=4, budget__baseline=False, **LONG)
    out = tmp_path / "runs"
    driver = subprocess.Popen(
        cli(spec, out),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            ts = trials(out)
            if any(t.state.is_finished() for t in ts) and any(t.state == TrialState.RUNNING for t in ts):
                break
            time.sleep(0.2)
        else:
            raise AssertionError("no trial ran")
        driver.send_signal(signal.SIGTERM)  # to the driver alone, as `kill` or `timeout` does
        _, err = driver.communicate(timeout=90)
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
    assert driver.returncode == 143, err[-2000:]
    assert "terminated (SIGTERM)" in err and "continue with --resume" in err
    assert "Traceback" not in err and "*** SIG" not in err
    ts = trials(out)
    assert not [t for t in ts if t.state == TrialState.RUNNING]
    interrupted = [t for t in ts if t.user_attrs.get("closed", "").startswith("interrupted")]
    assert interrupted, "the running trial was not closed as interrupted"
    waiting = [t for t in ts if t.state == TrialState.WAITING]
    assert {t.user_attrs["requeued_from"] for t in waiting} == {t.number for t in interrupted}
    time.sleep(1.0)
    assert not servers_of(tmp_path), "a server outlived its driver"

    resumed = subprocess.run(
        cli(spec, out, "--resume"), cwd=ROOT, capture_output=True, text=True, timeout=400
    )
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    after = trials(out)
    study = optuna.load_study(study_name="demo", storage=f"sqlite:///{out / 'optuna.db'}")
    closed = {int(n) for n in (study.user_attrs.get(StudyAttr.CLOSED_TRIALS) or {})}
    configs = launched_configs(after, closed)
    assert len(configs) == 4
    assert len(set(configs)) == len(configs), "a measured configuration was launched again"
    assert not [t for t in after if t.state in (TrialState.RUNNING, TrialState.WAITING)]
    assert not servers_of(tmp_path)


def test_time_budget_says_why_the_sweep_stopped(tmp_path: Path, demo_spec: Any) -> None:
    spec = demo_spec(budget__trials=3)
    proc = subprocess.run(
        cli(spec, tmp_path / "runs", "--time-budget", "0.001"),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "stopped early: the time budget ran out" in proc.stdout
    assert "continue with --resume" in proc.stdout


def test_sglang_backend_on_a_machine_without_gpus_fails_before_any_trial(
    tmp_path: Path, demo_spec: Any
) -> None:
    spec = demo_spec(backend="sglang")
    out = tmp_path / "runs"
    proc = subprocess.run(cli(spec, out), cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stdout[-2000:]
    assert "node.gpus" in proc.stderr and "GPU(s) seen by Ray" in proc.stderr and "NVML" in proc.stderr
    assert "no configuration completed" not in proc.stdout
    assert not trials(out)  # no study, no trial was started
