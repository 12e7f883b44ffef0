"""Ctrl-C: SIGINT to the driver mid-trial, then --resume, on the simulated node."""

from __future__ import annotations

import json
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
from e2ehelp import in_flight_after_one_settled, wait_until

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def in_session(sid: int) -> list[int]:
    pids = []
    for p in psutil.process_iter(["pid"]):
        try:
            if os.getsid(p.pid) == sid:
                pids.append(p.pid)
        except OSError:
            continue
    return pids


def test_ctrl_c_mid_trial_then_resume_reruns_the_interrupted_configuration(
    tmp_path: Path, demo_spec: Any
) -> None:
    # Two trials of one short stage: one settles, the other is interrupted mid-trial.
    spec = demo_spec(
        known_good=[],
        budget__trials=2,
        budget__baseline=False,
        workload__num_prompts=16,
        workload__output_len=256,
        workload__concurrency=[2],
    )
    out = tmp_path / "runs"
    cmd = [sys.executable, "-m", "orchestrator.sweep", str(spec), "--out", str(out), "--no-dashboard"]
    # SIGINT at its default, as in an interactive shell (a background job of a script ignores it).
    driver = subprocess.Popen(
        cmd,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    storage = f"sqlite:///{out / 'optuna.db'}"
    try:
        # The journal names a running trial's server as soon as it starts: the trial is in flight.
        wait_until(
            lambda: in_flight_after_one_settled(out / "demo"), 240, "a settled trial and a running one"
        )
        t0 = time.monotonic()
        os.kill(driver.pid, signal.SIGINT)
        rc = driver.wait(timeout=60)
        exit_s = time.monotonic() - t0
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
            driver.wait()
    assert rc == 130 and exit_s < 30
    # Nothing the driver started outlives it: Ray, the trial worker, the server.
    wait_until(lambda: not in_session(driver.pid), 20, "the driver's session to be empty")
    before = optuna.load_study(study_name="demo", storage=storage).trials
    interrupted = [t for t in before if t.user_attrs.get("closed")]
    assert len(interrupted) == 1 and interrupted[0].state == optuna.trial.TrialState.FAIL
    finished = {
        json.dumps(t.params, sort_keys=True): t.number for t in before if t.user_attrs.get("status") == "ok"
    }

    proc = subprocess.run([*cmd, "--resume"], cwd=ROOT, capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stderr[-2000:]
    after = optuna.load_study(study_name="demo", storage=storage).trials
    counted = [
        t
        for t in after
        if t.state.is_finished()
        and not t.user_attrs.get("closed")
        and t.user_attrs.get("status") not in ("predicted_oom", "lost")
        and "repeat_of" not in t.user_attrs
    ]
    assert len(counted) == 2
    # The interrupted configuration ran again, once; no finished one was launched a second time.
    rerun = [t for t in after if t.user_attrs.get("requeued_from") == interrupted[0].number]
    assert len(rerun) == 1 and rerun[0].params == interrupted[0].params and rerun[0].user_attrs.get("status")
    launched = [json.dumps(t.params, sort_keys=True) for t in counted]
    assert all(launched.count(key) == 1 for key in finished)


@pytest.mark.parametrize(
    ("after", "sent", "code", "said"),
    [
        ("budget:", signal.SIGINT, 130, "interrupted"),
        ("specsweep: study", signal.SIGINT, 130, "interrupted"),
        # Seen: SIGTERM while Ray started ended the driver with status 15 and not a word (Ray's own
        # handler, in place until the search's), where Ctrl-C says what was kept.
        ("budget:", signal.SIGTERM, 143, "terminated (SIGTERM) during set-up"),
        ("specsweep: study", signal.SIGTERM, 143, "terminated (SIGTERM) during set-up"),
    ],
)
def test_ctrl_c_or_sigterm_during_set_up_exits_without_a_traceback(
    tmp_path: Path, after: str, sent: signal.Signals, code: int, said: str
) -> None:
    """Seen: SIGINT while Ray, the study or MLflow started printed a traceback and exited 1 (once it was
    swallowed and the whole sweep ran). Now: exit 130 (143 for SIGTERM), one line saying what was kept, and
    a second run of the same command starts."""
    out = tmp_path / "runs"
    cmd = [sys.executable, "-m", "orchestrator.sweep", "--out", str(out), "--no-dashboard", "--trials", "1"]
    driver = subprocess.Popen(
        cmd,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert driver.stdout is not None
    seen = ""
    while after not in seen:  # the set-up step after that line: Ray's start, or the study's first trial
        line = driver.stdout.readline()
        assert line, f"the driver ended before printing {after!r}: {driver.communicate()}"
        seen += line
    driver.send_signal(sent)
    stdout, stderr = driver.communicate(timeout=120)
    assert driver.returncode == code, (seen + stdout, stderr[-3000:])
    assert "Traceback" not in stderr, stderr[-3000:]
    assert said in stderr, stderr[-3000:]
    # Nothing blocks the same command afterwards (an empty study does not take the name; a resumable
    # one is named by the line printed).
    again = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    if again.returncode != 0:
        assert "--resume" in stderr and again.returncode == 2, (stderr[-2000:], again.stderr[-2000:])
