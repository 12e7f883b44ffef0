"""The console stays the sweep's own: library notices the user cannot act on are silenced unless -v."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
# What the sweep's start-up makes the libraries print: Optuna's notice about `group`, its line for each
# new study (the report makes in-memory ones), Ray's notice that it set up token authentication, and
# MLflow's two lines when it creates a new store's tables (MLflow sets its loggers' level when first
# imported, after the CLI had quieted them: both lines reached every fresh sweep's console).
SCRIPT = """
import logging, sys, tempfile
from orchestrator.driver.console.quiet import quiet_libraries
quiet_libraries(verbose=sys.argv[1] == "-v", local_ray=True)
logging.basicConfig(level=logging.WARNING)
import mlflow
import optuna
from ray._private.authentication import authentication_token_setup
optuna.create_study(sampler=optuna.samplers.TPESampler(multivariate=True, group=True))
authentication_token_setup._warn_token_auth_enabled()
with tempfile.TemporaryDirectory() as tmp:
    mlflow.MlflowClient(tracking_uri=f"sqlite:///{tmp}/mlflow.db").search_experiments()
"""
NOISE = (
    "ExperimentalWarning",
    "A new study created in memory",
    "Token authentication is enabled",
    "Creating initial MLflow database tables",
)


@pytest.mark.parametrize("verbose", [False, True])
def test_library_notices_only_with_verbose(verbose: bool) -> None:
    # A test before this one may have run the CLI in this process, whose quieting sets MLFLOW_LOGGING_LEVEL
    # for MLflow to read at import: the script starts from the environment a user's shell has.
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_LOGGING_LEVEL"}
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, "-v" if verbose else "-"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = proc.stdout + proc.stderr
    for line in NOISE:
        assert (line in out) == verbose, (line, out)
