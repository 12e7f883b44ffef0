"""Run every test as a user's `python -m orchestrator.sweep` runs, whether or not `make test` started pytest.

Under make the driver prints `make sweep ARGS=...` as the command to continue (its python is the venv's);
a test that wants that form sets MAKELEVEL itself.
"""

from __future__ import annotations

import os
import sys

import pytest

_EXIT_STATUS = pytest.StashKey[int]()


@pytest.fixture(autouse=True)
def _not_under_make(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MAKELEVEL", raising=False)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    session.config.stash[_EXIT_STATUS] = int(exitstatus)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """End the process with the suite's verdict once pytest has written everything: on a clean clone the
    interpreter's own teardown once died of a segmentation fault after "1488 passed" was printed (native
    finalizers of the libraries the suite loads: Ray's core worker, torch, gRPC), and make took the crash
    for a failed suite. Ray is shut down first, so that no process of a test's cluster outlives the run."""
    status = config.stash.get(_EXIT_STATUS, None)
    if status is None:
        return
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        ray.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
