"""How a sweep stops: SIGTERM, a time budget, a node with no GPU. Each through the real CLI."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import optuna
import pytest
from e2ehelp import in_flight_after_one_settled, servers_of, wait_until
from optuna.trial import TrialState

from orchestrator.driver.store.trial_attrs import StudyAttr

ROOT = Path(__file__).resolve().parents[2]
# One stage of 16 requests two at a time: a trial of a few seconds, time for a signal to find it running.
SHORT = {"workload__num_prompts": 16, "workload__output_len": 256, "workload__concurrency": [2]}


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
    # Two trials: one settles, the other is stopped mid-trial and relaunched once by --resume. A stage
    # of a few seconds leaves the signal a trial in flight; the journal says when one is.
    spec = demo_spec(known_good=[], budget__trials=2, budget__baseline=False, **SHORT)
    out = tmp_path / "runs"
    # Its output goes to a file: a pipe nobody reads while the sweep runs could fill and stall it.
    err_path = tmp_path / "driver.err"
    with err_path.open("w") as err_file:
        driver = subprocess.Popen(
            cli(spec, out),
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=err_file,
            start_new_session=True,
        )
    try:
        in_flight = lambda: in_flight_after_one_settled(out / "demo")  # noqa: E731
        wait_until(in_flight, 240, "a settled trial and a running one")
        driver.send_signal(signal.SIGTERM)  # to the driver alone, as `kill` or `timeout` does
        driver.wait(timeout=90)
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
    err = err_path.read_text()
    assert driver.returncode == 143, err[-2000:]
    assert "terminated (SIGTERM)" in err and "--study demo --out" in err and "--resume" in err
    assert "Traceback" not in err and "*** SIG" not in err
    ts = trials(out)
    assert not [t for t in ts if t.state == TrialState.RUNNING]
    interrupted = [t for t in ts if t.user_attrs.get("closed", "").startswith("interrupted")]
    assert interrupted, "the running trial was not closed as interrupted"
    waiting = [t for t in ts if t.state == TrialState.WAITING]
    assert {t.user_attrs["requeued_from"] for t in waiting} == {t.number for t in interrupted}
    # Its trial's worker ends with the driver's Ray, and the server with its worker.
    wait_until(lambda: not servers_of(tmp_path), 30, "the servers to end with their driver")

    resumed = subprocess.run(
        cli(spec, out, "--resume"), cwd=ROOT, capture_output=True, text=True, timeout=400
    )
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    after = trials(out)
    study = optuna.load_study(study_name="demo", storage=f"sqlite:///{out / 'optuna.db'}")
    closed = {int(n) for n in (study.user_attrs.get(StudyAttr.CLOSED_TRIALS) or {})}
    configs = launched_configs(after, closed)
    assert len(configs) == 2
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
    # With the interpreter that ran it (a bare `python` may lack its packages), as seen from where it ran.
    command = proc.stdout.split("to continue: ", 1)[1].split()
    assert command[1:3] == ["-m", "orchestrator.sweep"], command
    assert os.path.abspath(ROOT / command[0]) == os.path.abspath(sys.executable)


def test_sglang_backend_on_a_machine_without_gpus_fails_before_any_trial(
    tmp_path: Path, demo_spec: Any
) -> None:
    # The models exist here (their folders and config.json), so what stops it is the GPUs Ray sees (the
    # paths are checked first: a folder without its config.json is refused naming it, before Ray starts).
    target, draft = tmp_path / "target", tmp_path / "draft"
    for folder, model in ((target, "tiny-llama"), (draft, "tiny-llama-eagle3")):
        folder.mkdir()
        shutil.copy(ROOT / "trials" / "models" / model / "config.json", folder / "config.json")
    spec = demo_spec(backend="sglang", model__path=str(target), model__draft_path=str(draft))
    out = tmp_path / "runs"
    proc = subprocess.run(cli(spec, out), cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stdout[-2000:]
    assert "node.gpus" in proc.stderr and "GPU(s) seen by Ray" in proc.stderr and "NVML" in proc.stderr
    assert "no configuration completed" not in proc.stdout
    assert not trials(out)  # no study, no trial was started
