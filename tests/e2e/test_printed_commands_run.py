"""Every command a sweep prints runs as printed: a sweep started from a folder outside the checkout, with
no venv on PATH, prints where to watch it, how to continue it and where its trials are; each executable it
names is found by a new user's shell, each store it names is the one the sweep wrote, and the command to
continue it runs as printed."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from e2ehelp import GOOD

from tests.driver.console.test_printed_commands import BARE_ENV, executable_of, run_as_printed


def printed(pattern: str, text: str) -> str:
    found = re.search(pattern, text, re.M)
    assert found is not None, f"{pattern!r} not in:\n{text}"
    return found.group(1)


@pytest.mark.slow
def test_a_sweep_from_another_folder_prints_commands_that_run_as_printed(
    tmp_path: Path, demo_spec: Any
) -> None:
    spec = demo_spec(known_good=[GOOD], workload__num_prompts=8, workload__concurrency=[8])
    here = tmp_path / "elsewhere"
    here.mkdir()
    # The default --out, relative: runs/ of this folder. --time-budget 0.01 stops before the budget is spent,
    # so the sweep prints the command that continues it.
    argv = [sys.executable, "-m", "orchestrator.sweep", str(spec), "--trials", "2", "--no-dashboard"]
    proc = subprocess.run(
        [*argv, "--time-budget", "0.01"], cwd=here, env=BARE_ENV, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    stores = {"mlflow": here / "runs" / "mlflow.db", "optuna": here / "runs" / "optuna.db"}
    assert all(p.is_file() for p in stores.values())

    mlflow_ui = printed(r"MLflow UI \(compare trials\): (.+)$", out)
    dashboard = printed(r"Optuna dashboard \(live study\): (.+)$", out)
    closing = printed(r"^trials in MLflow \(after `([^`]+)`\)", out)
    resume = printed(r"to continue: (.+)$", out)
    assert executable_of(mlflow_ui, here).name == "mlflow"
    assert executable_of(closing, here).name == "mlflow"
    assert executable_of(dashboard, here).name == "optuna-dashboard"
    for command in (mlflow_ui, closing):
        assert f"--backend-store-uri sqlite:///{stores['mlflow']}" in command, command
    assert shlex.split(dashboard)[1] == f"sqlite:///{stores['optuna']}"
    mlflow_help = run_as_printed(shlex.join(shlex.split(mlflow_ui)[:2]), here, "--help")
    assert mlflow_help.returncode == 0, mlflow_help.stderr[-2000:]

    # The command to continue, as printed (its --time-budget 0.01 kept: it stops again, with the same line).
    again = run_as_printed(resume, here)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "the study's own budget" in again.stdout and printed(r"to continue: (.+)$", again.stdout) == resume
