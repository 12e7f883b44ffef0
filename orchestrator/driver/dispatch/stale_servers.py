"""The servers a driver launched, recorded as they start, so that the next driver can stop what a killed
one left running.

A trial's server dies with its trial worker (`server.process`: the parent-death signal, its own process
group), but a node may still keep one alive: a worker that outlived its driver, a kernel without the
signal. So the journal keeps, per trial, the server's pid, create time and host, written as soon as the
trial reports its launch and removed when its result comes back. A driver that starts on a study (it
holds the study's lease, so no live driver owns these trials) stops every recorded server still alive on
its host: only those pids, and only when the create time matches, so a reused pid is never killed.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

import psutil
import pydantic

from orchestrator.trial_events import ServerId

log = logging.getLogger(__name__)

# psutil computes a create time from the boot time and the start tick: the same process reads the same
# value each time; a tolerance of a few ticks still tells two processes apart.
CREATE_TIME_TOLERANCE_S = 0.05


@dataclass(frozen=True)
class LaunchedServer:
    number: int
    server: ServerId


_ADAPTER: pydantic.TypeAdapter[LaunchedServer] = pydantic.TypeAdapter(LaunchedServer)


class StaleVerdict(StrEnum):
    STOPPED = "stopped"
    GONE = "gone"  # exited already, or its pid now names another process
    ELSEWHERE = "elsewhere"  # on another host: this driver cannot reach it
    NOT_PERMITTED = "not permitted"  # another user's process now: not ours to stop


@dataclass(frozen=True)
class StaleOutcome:
    launched: LaunchedServer
    verdict: StaleVerdict

    def describe(self) -> str:
        s = self.launched.server
        if self.verdict is StaleVerdict.STOPPED:
            return f"stopped server pid {s.pid} left by trial {self.launched.number} (its driver was killed)"
        if self.verdict is StaleVerdict.NOT_PERMITTED:
            return f"server pid {s.pid} of trial {self.launched.number} could not be stopped: not permitted"
        return (
            f"server pid {s.pid} of trial {self.launched.number} runs on {s.host}, not here: "
            "stop it there if it still runs"
        )


class LaunchedServers:
    """``FOLDER/NNNN.json`` for each trial whose server runs (or ran when its driver died)."""

    def __init__(self, folder: Path | None) -> None:
        self.folder = folder
        self._recorded: set[int] = set()

    def record(self, number: int, server: ServerId) -> None:
        if self.folder is None or number in self._recorded:
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / f"{number:04d}.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(_ADAPTER.dump_json(LaunchedServer(number, server)))
        os.replace(tmp, path)
        self._recorded.add(number)

    def forget(self, number: int) -> None:
        """The trial is over (its result came back): its server was stopped with it."""
        self._recorded.discard(number)
        if self.folder is not None:
            (self.folder / f"{number:04d}.json").unlink(missing_ok=True)

    def recorded(self) -> Iterator[LaunchedServer]:
        if self.folder is None or not self.folder.is_dir():
            return
        for path in sorted(self.folder.glob("*.json")):
            try:
                yield _ADAPTER.validate_json(path.read_bytes())
            except (OSError, pydantic.ValidationError) as err:
                log.warning("unreadable server record %s: %s", path, err)

    def stop_stale(self) -> list[StaleOutcome]:
        """Stop every recorded server still alive here; forget those stopped or gone. Call it only while
        holding the study's lease: then no live driver owns them."""
        outcomes = []
        for launched in list(self.recorded()):
            verdict = stop_server(launched.server)
            if verdict in (StaleVerdict.STOPPED, StaleVerdict.GONE):
                self.forget(launched.number)
            if verdict is not StaleVerdict.GONE:
                outcome = StaleOutcome(launched, verdict)
                log.warning("%s", outcome.describe())
                outcomes.append(outcome)
        return outcomes


def stop_server(server: ServerId, timeout_s: float = 10.0) -> StaleVerdict:
    """SIGKILL the server and its process group, if `server.pid` still names that very process."""
    if server.host != socket.gethostname():
        return StaleVerdict.ELSEWHERE
    try:
        proc = psutil.Process(server.pid)
        if abs(proc.create_time() - server.create_time) > CREATE_TIME_TOLERANCE_S:
            return StaleVerdict.GONE  # the pid was reused: not ours
        if proc.status() == psutil.STATUS_ZOMBIE:
            return StaleVerdict.GONE
        victims = [proc, *proc.children(recursive=True)]
        # Verified alive, so its pid names its group and no other (see server.process).
        if os.getpgid(server.pid) == server.pid:
            os.killpg(server.pid, signal.SIGKILL)
    except (psutil.NoSuchProcess, ProcessLookupError):
        return StaleVerdict.GONE
    except (psutil.AccessDenied, PermissionError):
        return StaleVerdict.NOT_PERMITTED
    for victim in victims:
        try:
            victim.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(victims, timeout=timeout_s)
    return StaleVerdict.STOPPED
