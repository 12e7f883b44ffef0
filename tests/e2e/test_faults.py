"""Faults survived: a lost node, a killed worker, a killed driver. Each on real Ray and simulated nodes."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import optuna
import psutil
import pytest
import ray
from e2ehelp import (
    in_flight_after_one_settled,
    launched_servers,
    server_gone,
    servers_of,
    sim_cluster,
    wait_until,
)
from ray.cluster_utils import Cluster

from orchestrator.cli import resolve_profile
from orchestrator.driver.dispatch import cluster
from orchestrator.driver.dispatch.stale_servers import LaunchedServers
from orchestrator.driver.loop.sweep import Sweep
from orchestrator.driver.store.study import open_study
from orchestrator.driver.store.tracking import Tracker
from orchestrator.node.backends import SimulatedNode
from orchestrator.records import TrialStatus
from orchestrator.spec.search import make_config
from orchestrator.spec.sweep_spec import load_spec
from orchestrator.trial_events import ServerId, TrialRequest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow

LONG = {"workload__num_prompts": 64, "workload__output_len": 256, "workload__concurrency": [2]}


@pytest.fixture
def two_nodes() -> Iterator[Cluster]:
    with sim_cluster(2) as c:
        yield c


def test_killed_worker_takes_its_server_with_it(two_nodes: Cluster, tmp_path: Path, demo_spec: Any) -> None:
    spec = load_spec(demo_spec(**LONG))
    profile = resolve_profile(spec)
    assert profile is not None
    node_id = cluster.alive_nodes()[0]["NodeID"]
    node = SimulatedNode(spec, node_id, profile)
    request = TrialRequest(
        spec=spec,
        config=make_config(0.88, 128, 48, 3, 1, 4),
        number=0,
        workdir=str(tmp_path / "t"),
        sim_profile=profile,
    )
    ref = cluster.submit(request, None, node_id)
    pids = wait_until(node.server_pids, 60, "the server to hold GPU memory")
    ray.cancel(ref, force=True)  # kills the worker process
    wait_until(
        lambda: not any(psutil.pid_exists(p) and psutil.Process(p).status() != "zombie" for p in pids),
        20,
        "the server to die with its worker",
    )
    assert not node.server_pids()


def test_lost_node_is_requeued_once_and_the_sweep_finishes(
    two_nodes: Cluster, tmp_path: Path, demo_spec: Any
) -> None:
    spec = load_spec(demo_spec(known_good=[], budget__trials=3, budget__baseline=False, **LONG))
    cluster.connect(spec, two_nodes.address)
    study = open_study(spec, "lost", f"sqlite:///{tmp_path / 'o.db'}", resume=False)
    tracker = Tracker(f"sqlite:///{tmp_path / 'm.db'}", "lost", tmp_path / "spool")
    tracker.start("t", {}, {})
    sweep = Sweep(spec, study, tracker, n_trials=3, workdir=tmp_path, sim_profile=resolve_profile(spec))
    sweep.prepare(resume=False)
    done: dict[str, Any] = {}
    runner = threading.Thread(target=lambda: done.update(outcome=sweep.run()))
    runner.start()
    # Wait until a trial is running on a worker node, then take that node away.
    victim_id = wait_until(lambda: next(iter(sweep.running_nodes()), None), 60, "a trial to start")
    victim = next(n for n in two_nodes.worker_nodes if n.node_id == victim_id)
    time.sleep(3)
    two_nodes.remove_node(victim)
    runner.join(timeout=400)
    assert not runner.is_alive()
    records = done["outcome"].records
    lost = [r for r in records if r.result.status is TrialStatus.LOST]
    assert len(lost) >= 1
    assert lost[0].result.failure is not None and lost[0].result.failure.kind.value == "node_lost"
    # Not an OOM: the study saw FAIL, not a violated constraint.
    t = study.trials[lost[0].number]
    assert t.state == optuna.trial.TrialState.FAIL and not t.constraints
    requeued = [t for t in study.trials if t.user_attrs.get("requeued_from") == lost[0].number]
    assert len(requeued) == 1 and requeued[0].params == t.params
    launched = [r for r in records if r.result.status is not TrialStatus.PREDICTED_OOM]
    assert sum(r.result.status is not TrialStatus.LOST for r in launched) == 3


def test_driver_killed_then_resume_loses_and_repeats_nothing(tmp_path: Path, demo_spec: Any) -> None:
    spec = demo_spec(known_good=[], budget__trials=4, budget__baseline=False)
    out = tmp_path / "runs"
    cmd = [sys.executable, "-m", "orchestrator.sweep", str(spec), "--out", str(out), "--no-dashboard"]
    driver = subprocess.Popen(
        cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    storage = f"sqlite:///{out / 'optuna.db'}"
    try:
        # Killed with a trial in flight and its server up (the journal names it as soon as it starts):
        # that trial must be closed and run again, not counted; its server must not outlive it.
        servers = wait_until(
            lambda: in_flight_after_one_settled(out / "demo"), 300, "a settled trial and a running server"
        )
        os.kill(driver.pid, signal.SIGKILL)  # the driver alone, as `kill -9` does
        driver.wait()
        # The driver's Ray goes with it, the trial's worker with Ray, and the server with its worker.
        wait_until(lambda: all(server_gone(s) for s in servers), 60, "the killed driver's servers to end")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(driver.pid, signal.SIGKILL)  # whatever of the local Ray it started is left
        driver.wait()
    assert not servers_of(tmp_path), "a server outlived its driver"
    # Were one to survive all the same (a kernel without the parent-death signal), the journal names it
    # and --resume stops it before its first trial. A stand-in takes the killed trial's record.
    journal = LaunchedServers(out / "demo" / "records" / "servers")
    # (The killed trial's record, left since its result never came back; any number would do.)
    number = next((r.number for r in journal.recorded()), 9999)
    survivor = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], process_group=0)
    created = psutil.Process(survivor.pid).create_time()
    journal.forget(number)
    journal.record(number, ServerId(survivor.pid, created, socket.gethostname()))
    before = optuna.load_study(study_name="demo", storage=storage).trials
    try:
        proc = subprocess.run([*cmd, "--resume"], cwd=ROOT, capture_output=True, text=True, timeout=400)
        assert survivor.wait(timeout=10) == -signal.SIGKILL
    finally:
        survivor.kill()
        survivor.wait()
    assert proc.returncode == 0, proc.stderr[-2000:]
    said = f"stopped server pid {survivor.pid} left by trial {number} (its driver was killed)"
    assert said in proc.stderr
    after = optuna.load_study(study_name="demo", storage=storage).trials
    # Every trial finished before the kill is still there, unchanged.
    for old in before:
        if old.state.is_finished():
            assert after[old.number].state == old.state and after[old.number].params == old.params
    closed = optuna.load_study(study_name="demo", storage=storage).user_attrs.get("closed_trials") or {}
    stale = [after[int(n)] for n in closed]
    assert stale, "the trial the dead driver left running was not closed"
    for t in stale:
        assert t.state == optuna.trial.TrialState.FAIL
        assert any(u.user_attrs.get("requeued_from") == t.number for u in after)
    counted = [
        t
        for t in after
        if t.state.is_finished()
        and str(t.number) not in closed
        and t.user_attrs.get("status") not in ("predicted_oom", "lost")
        and "repeat_of" not in t.user_attrs
    ]
    assert len(counted) == 4
    assert not [t for t in after if t.state == optuna.trial.TrialState.RUNNING]
    assert not launched_servers(out / "demo") and not servers_of(tmp_path)
