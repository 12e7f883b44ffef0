"""The Makefile's UI targets: a PORT= override, and they stay bound to 127.0.0.1."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(("target", "default"), [("mlflow-ui", "5000"), ("optuna-dashboard", "8080")])
def test_ui_targets_take_a_port_and_bind_to_localhost(target: str, default: str) -> None:
    if shutil.which("make") is None:
        pytest.skip("no make")
    venv = str(Path(sys.executable).parents[1])

    # Run from `make test` the outer make's MAKEFLAGS/MAKELEVEL would make this one print "Entering /
    # Leaving directory" lines around the recipe: a clean environment, as a user's shell has.
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}

    def command(*extra: str) -> str:
        done = subprocess.run(
            ["make", "--no-print-directory", "-n", target, f"VENV={venv}", *extra],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
            env=env,
        )
        return done.stdout.strip().splitlines()[-1]  # -n prints the recipe; the last line is the server

    assert command().endswith(f"--host 127.0.0.1 --port {default}")
    assert command("PORT=5123").endswith("--host 127.0.0.1 --port 5123")


def test_make_test_runs_every_test_and_make_unit_leaves_out_the_end_to_end_sweeps_and_slow_tests() -> None:
    if shutil.which("make") is None:
        pytest.skip("no make")
    venv = str(Path(sys.executable).parents[1])
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}

    def recipe(target: str) -> list[str]:
        done = subprocess.run(
            ["make", "--no-print-directory", "-n", target, f"VENV={venv}"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
            env=env,
        )
        return [line for line in done.stdout.splitlines() if "pytest" in line]

    (unit,) = recipe("unit")
    assert "--ignore=tests/e2e" in unit and '-m "not slow"' in unit
    runs = recipe(
        "test"
    )  # CI's command: the fast loop's tests with the slow ones, then the end-to-end sweeps
    assert len(runs) == 2 and "--ignore=tests/e2e" in runs[0] and runs[1].split()[-1] == "tests/e2e"
    assert "not slow" not in " ".join(runs)
