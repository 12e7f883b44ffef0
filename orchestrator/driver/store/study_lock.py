"""One driver per study: a lease on the study, Optuna heartbeats on its running trials.

Two drivers on one study corrupt it: the second one closes the first one's running trial as stale and
the first then crashes telling it. So a driver holds a lease, a study attribute it refreshes every few
seconds, and records Optuna's own heartbeat for each trial it has in flight
(`RDBStorage(heartbeat_interval=..., grace_period=...)`). A second driver is refused while the lease is
fresh. A running trial is closed as stale only once its driver is gone: its lease's heartbeat has
stopped for the grace period, or, on the same host, the lease's process has ended.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import optuna
import psutil
from optuna.storages import RDBStorage
from optuna.storages._heartbeat import BaseHeartbeat
from optuna.trial import FrozenTrial, TrialState

from orchestrator.driver.store.trial_attrs import StudyAttr, TrialAttr, requeued_attrs
from orchestrator.errors import ErrorKind, SpecsweepError

log = logging.getLogger(__name__)

HEARTBEAT_S = 5  # how often a live driver says so (Optuna wants whole seconds)
GRACE_S = 20  # silence after which a driver, and its trials, are taken for dead


class StudyInUse(SpecsweepError, RuntimeError):
    """Another live driver holds the study."""

    kind = ErrorKind.STUDY_REFUSED


@dataclass(frozen=True)
class DriverStamp:
    driver_id: str
    host: str
    pid: int
    beat_unix: float

    @classmethod
    def from_attr(cls, value: Any) -> DriverStamp | None:
        if not isinstance(value, dict):
            return None
        try:
            return cls(
                str(value["driver_id"]), str(value["host"]), int(value["pid"]), float(value["beat_unix"])
            )
        except (KeyError, TypeError, ValueError):
            return None

    def dead_here(self) -> bool:
        """Provably dead: its host is this one and its process is gone (no need to wait for the grace)."""
        if self.host != socket.gethostname():
            return False
        try:
            proc = psutil.Process(self.pid)
        except psutil.NoSuchProcess:
            return True
        return proc.status() == psutil.STATUS_ZOMBIE

    def live(self, now: float | None = None) -> bool:
        now = time.time() if now is None else now
        return not self.dead_here() and now - self.beat_unix < GRACE_S

    def describe(self, now: float | None = None) -> str:
        ago = (time.time() if now is None else now) - self.beat_unix
        return f"pid {self.pid} on {self.host}, last heartbeat {ago:.0f} s ago"


def make_storage(url: str) -> RDBStorage:
    """The Optuna storage with heartbeats on, and stale trials re-queued by Optuna's own callback."""
    # Optuna warns on every ask that heartbeats are meant for `optimize`; the lease records them for
    # ask/tell, which is what that warning cannot see.
    warnings.filterwarnings(
        "ignore", message="Heartbeat of storage is supposed to be used", category=UserWarning
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return RDBStorage(
            url,
            heartbeat_interval=HEARTBEAT_S,
            grace_period=GRACE_S,
            heartbeat_stale_trial_callback=requeue_closed,
        )


def storage_exists(url: str) -> bool:
    """Whether `url` can hold a study already; a SQLite file that is not there cannot (and opening it
    would create it, and its folder must exist first)."""
    if url.startswith("sqlite:///"):
        return Path(url.removeprefix("sqlite:///")).is_file()
    return True


def find_study(storage: RDBStorage, name: str) -> optuna.Study | None:
    try:
        return optuna.load_study(study_name=name, storage=storage)
    except KeyError:
        return None


def current_driver(study: optuna.Study) -> DriverStamp | None:
    return DriverStamp.from_attr(study.user_attrs.get(StudyAttr.DRIVER))


def closed_numbers(study: optuna.Study) -> set[int]:
    closed = study.user_attrs.get(StudyAttr.CLOSED_TRIALS) or {}
    return {int(n) for n in closed}


def _mark_closed(study: optuna.Study, number: int, why: str) -> None:
    closed = dict(study.user_attrs.get(StudyAttr.CLOSED_TRIALS) or {})
    closed[str(number)] = why
    study.set_user_attr(StudyAttr.CLOSED_TRIALS, closed)


def requeue_closed(study: optuna.Study, trial: FrozenTrial) -> None:
    """A trial closed on a dead driver's behalf says nothing about its configuration: run it again."""
    _mark_closed(study, trial.number, "stale: its driver's heartbeat stopped")
    study.enqueue_trial(dict(trial.params), user_attrs=requeued_attrs(trial.number, trial.user_attrs))
    # The driver shows it on the console as an interrupted trial; the log has it with -v.
    log.info("closed stale trial %d (its driver stopped) and re-queued its configuration", trial.number)


# What to record on a dead driver's trial before it is closed (a closed trial takes no more attributes).
AttrsOf = Callable[[FrozenTrial, "DriverStamp | None"], dict[str, Any]]


def close_dead_drivers_trials(
    study: optuna.Study, me: str | None = None, attrs_of: AttrsOf | None = None
) -> list[int]:
    """Close the RUNNING trials whose driver is dead, re-queueing their configurations; each first gets
    the attributes ``attrs_of`` gives it (the driver's record of an interrupted trial).

    Refuses (StudyInUse) while a live driver holds the study. Returns the numbers of the trials closed.
    """
    owner = current_driver(study)
    if owner is not None and owner.driver_id != me and owner.live():
        raise StudyInUse(owner.describe())
    # No live driver holds the study (checked above), and this one has asked for nothing yet: whatever is
    # still RUNNING was left by a driver that is gone, whether its heartbeat is older than Optuna's grace
    # period (what `fail_stale_trials` would close) or not (on this host its process has ended). Each is
    # closed here rather than by `fail_stale_trials`, so that it gets its attributes before the FAIL.
    dead = owner if owner is not None and owner.driver_id != me else None
    closed = []
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if TrialAttr.WAITS_FOR in t.user_attrs:  # a draw that waited for a twin: never launched (`twins`)
            _mark_closed(study, t.number, "not launched: it waited for a twin's record")
            study._storage.set_trial_state_values(t._trial_id, state=TrialState.FAIL)
            closed.append(t.number)
            continue
        for key, value in (attrs_of(t, dead) if attrs_of is not None else {}).items():
            study._storage.set_trial_user_attr(t._trial_id, key, value)
        study._storage.set_trial_state_values(t._trial_id, state=TrialState.FAIL)
        requeue_closed(study, study._storage.get_trial(t._trial_id))
        closed.append(t.number)
    return sorted(closed)


class DriverLease:
    """Holds a study for one driver: refreshes the lease and the in-flight trials' heartbeats."""

    def __init__(self, study: optuna.Study) -> None:
        self.study = study
        self.stamp = DriverStamp(uuid.uuid4().hex, socket.gethostname(), os.getpid(), time.time())
        self._trial_ids: set[int] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def acquire(self) -> None:
        owner = current_driver(self.study)
        if owner is not None and owner.driver_id != self.stamp.driver_id and owner.live():
            raise StudyInUse(owner.describe())
        self._beat()
        self._thread = threading.Thread(target=self._loop, name="specsweep-heartbeat", daemon=True)
        self._thread.start()

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=HEARTBEAT_S * 2)
        owner = current_driver(self.study)
        if owner is not None and owner.driver_id == self.stamp.driver_id:
            self.study.set_user_attr(StudyAttr.DRIVER, None)

    def track(self, trial_id: int) -> None:
        with self._lock:
            self._trial_ids.add(trial_id)
        self._beat_trial(trial_id)

    def untrack(self, trial_id: int) -> None:
        with self._lock:
            self._trial_ids.discard(trial_id)

    def _beat(self) -> None:
        stamp = DriverStamp(self.stamp.driver_id, self.stamp.host, self.stamp.pid, time.time())
        self.study.set_user_attr(StudyAttr.DRIVER, asdict(stamp))

    def _beat_trial(self, trial_id: int) -> None:
        # A study never holds the RDBStorage itself: Optuna wraps it in a cache that passes heartbeats
        # on. Ask for the heartbeat interface, not the class (testing for RDBStorage never beat at all).
        storage = self.study._storage
        if isinstance(storage, BaseHeartbeat) and storage.get_heartbeat_interval():
            storage.record_heartbeat(trial_id)

    def _loop(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            try:
                self._beat()
                with self._lock:
                    ids = list(self._trial_ids)
                for trial_id in ids:
                    self._beat_trial(trial_id)
            except Exception as err:  # a missed beat must not kill the sweep; the next one may pass
                log.warning("heartbeat not recorded: %s", err)
