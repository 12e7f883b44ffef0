"""What a killed driver left running is stopped by the next one: only the servers its journal recorded,
and only when the pid still names the very process (its create time), never by name."""

from __future__ import annotations

import logging
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import cast

import psutil
import pytest
from optuna.storages import InMemoryStorage

from benchmarks.truth.oracle import Oracle
from orchestrator.driver.dispatch.executor import Handle
from orchestrator.driver.dispatch.stale_servers import LaunchedServers, StaleVerdict, stop_server
from orchestrator.driver.search.space import params_for
from orchestrator.driver.store.study import open_study
from orchestrator.records import ServerConfig, TrialResult
from orchestrator.trial_events import Phase, PhaseEvent, ServerId, TrialEvent
from tests.driver.loop.test_driver_decisions import InProcessExecutor, _sweep, configs, oracle  # noqa: F401

HOST = socket.gethostname()


@pytest.fixture
def stale() -> Iterator[psutil.Process]:
    """A process in a group of its own, as a server left by a killed driver."""
    popen = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], process_group=0)
    proc = psutil.Process(popen.pid)
    yield proc
    popen.kill()
    popen.wait()


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _until_dead(proc: psutil.Process, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while _alive(proc) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not _alive(proc)


def test_resume_stops_the_server_a_killed_driver_left_and_says_so(
    oracle: Oracle,  # noqa: F811
    stale: psutil.Process,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # What the killed driver's journal holds: trial 21 was launched, its result never came back.
    LaunchedServers(tmp_path / "records" / "servers").record(
        21, ServerId(stale.pid, stale.create_time(), HOST)
    )
    study = open_study(oracle.spec, "stale", InMemoryStorage(), resume=False)
    sweep = _sweep(oracle.spec, study, InProcessExecutor(oracle), n_trials=1, workdir=tmp_path)
    # The logger named: another test (the search benchmark's) may have quietened orchestrator.driver.
    with caplog.at_level(logging.WARNING, logger="orchestrator.driver.dispatch.stale_servers"):
        sweep.prepare(resume=True)
    assert _until_dead(stale)
    assert f"stopped server pid {stale.pid} left by trial 21 (its driver was killed)" in caplog.text
    assert not list(sweep.journal.servers.recorded())  # stopped: forgotten


def test_a_pid_whose_create_time_differs_is_never_killed(stale: psutil.Process, tmp_path: Path) -> None:
    servers = LaunchedServers(tmp_path)
    # The recorded server ended and its pid was given to another process (this one) since.
    servers.record(3, ServerId(stale.pid, stale.create_time() - 5.0, HOST))
    assert servers.stop_stale() == []
    assert _alive(stale)
    assert not list(servers.recorded())  # gone: nothing to stop next time either


def test_a_server_on_another_host_is_left_to_that_host(stale: psutil.Process, tmp_path: Path) -> None:
    server = ServerId(stale.pid, stale.create_time(), HOST + "-elsewhere")
    assert stop_server(server) is StaleVerdict.ELSEWHERE
    assert _alive(stale)


class _ReportsItsServer(InProcessExecutor):
    """Each trial reports its server's launch before its result, as a trial on Ray does."""

    def __init__(self, oracle: Oracle, server: ServerId, folder: Path) -> None:  # noqa: F811
        super().__init__(oracle)
        self.server = server
        self.folder = folder
        self.reported: set[int] = set()
        self.recorded_while_running: list[bool] = []

    def wait(self, handles: Sequence[Handle], timeout_s: float) -> tuple[list[Handle], list[TrialEvent]]:
        number = cast(int, handles[0])
        if number not in self.reported:
            self.reported.add(number)
            now = time.time()
            return [], [PhaseEvent(number, Phase.LAUNCH, now, now, "node-a", server=self.server)]
        return super().wait(handles, timeout_s)

    def result(self, handle: Handle) -> TrialResult:
        self.recorded_while_running.append((self.folder / f"{cast(int, handle):04d}.json").is_file())
        return super().result(handle)


def test_the_sweep_records_each_server_while_its_trial_runs_and_forgets_it_after(
    oracle: Oracle,  # noqa: F811
    configs: dict[str, ServerConfig],  # noqa: F811
    tmp_path: Path,
) -> None:
    study = open_study(oracle.spec, "record", InMemoryStorage(), resume=False)
    study.enqueue_trial(params_for(configs["good"]))
    executor = _ReportsItsServer(oracle, ServerId(4321, 1.5, HOST), tmp_path / "records" / "servers")
    sweep = _sweep(oracle.spec, study, executor, n_trials=1, workdir=tmp_path)
    sweep.prepare(resume=False)
    sweep.run()
    assert executor.recorded_while_running == [True]
    assert not list(sweep.journal.servers.recorded())
