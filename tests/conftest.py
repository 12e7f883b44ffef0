"""Run every test as a user's `python -m orchestrator.sweep` runs, whether or not `make test` started pytest.

Under make the driver prints `make sweep ARGS=...` as the command to continue (its python is the venv's);
a test that wants that form sets MAKELEVEL itself.
"""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _not_under_make(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MAKELEVEL", raising=False)
