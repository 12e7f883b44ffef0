"""The console stays the sweep's own: library notices the user cannot act on are silenced unless -v."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
# What the sweep's start-up makes the libraries print: Optuna's notice about `group`, its line for each
# new study (the report makes in-memory ones), and Ray's notice that it set up token authentication.
SCRIPT = """
import logging, sys
from orchestrator.driver.console.quiet import quiet_libraries
quiet_libraries(verbose=sys.argv[1] == "-v", local_ray=True)
logging.basicConfig(level=logging.WARNING)
import optuna
from ray._private.authentication import authentication_token_setup
optuna.create_study(sampler=optuna.samplers.TPESampler(multivariate=True, group=True))
authentication_token_setup._warn_token_auth_enabled()
"""
NOISE = ("ExperimentalWarning", "A new study created in memory", "Token authentication is enabled")


@pytest.mark.parametrize("verbose", [False, True])
def test_library_notices_only_with_verbose(verbose: bool) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, "-v" if verbose else "-"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = proc.stdout + proc.stderr
    for line in NOISE:
        assert (line in out) == verbose, (line, out)
