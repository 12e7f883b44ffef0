"""The executables of the commands a sweep prints for the user to run next (continue it, open MLflow or
the Optuna dashboard, write its report), in forms that run as printed.

A fresh clone's `make sweep` runs `.venv/bin/python` with no venv activated, so neither a bare `python`
(it lacks the packages) nor `mlflow` / `optuna-dashboard` (not on PATH) would run. Each command therefore
names the interpreter that ran the sweep, and each tool by its script beside that interpreter. Paths are
shown relative to the working folder when they lie under it (`.venv/bin/python`, as a user types it),
absolute otherwise, and never with symlinks resolved: a venv's python is a symlink to the base
interpreter, which has none of the venv's packages.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from pathlib import Path


def shown_path(path: str | Path) -> str:
    """``path`` as a printed command names it: relative to the working folder when under it (``./`` added
    to an executable's name alone, which a shell would otherwise look up on PATH), else absolute."""
    absolute = Path(os.path.abspath(path))
    try:
        relative = absolute.relative_to(Path.cwd())
    except ValueError:
        return str(absolute)
    text = str(relative)
    return text if os.sep in text else f".{os.sep}{text}"


def python_argv() -> list[str]:
    """The interpreter that runs this process, as a printed command names it."""
    return [shown_path(sys.executable)]


def _installed(script: str) -> str | None:
    """A console script of the environment this process runs in: the one beside its interpreter, else the
    one on PATH, else None."""
    beside = Path(os.path.abspath(sys.executable)).parent / script
    if beside.is_file() and os.access(beside, os.X_OK):
        return shown_path(beside)
    return shutil.which(script)


def tool_argv(script: str) -> list[str]:
    """A console script (``mlflow``, ``optuna-dashboard``) as a printed command names it: where it is
    installed, else its bare name."""
    return [_installed(script) or script]


def module_command(module: str, *args: str) -> str:
    """``python -m module args`` with the interpreter that runs this process, quoted for a shell."""
    return shlex.join([*python_argv(), "-m", module, *args])


def tool_command(script: str, *args: str) -> str:
    """A console script with its arguments, quoted for a shell."""
    return shlex.join([*tool_argv(script), *args])


def mlflow_ui_command(tracking_uri: str, port: int | None = None) -> str:
    """`mlflow ui` on the store ``tracking_uri``, bound to this machine only."""
    args = ["ui", "--backend-store-uri", tracking_uri, "--host", "127.0.0.1"]
    return tool_command("mlflow", *args, *(["--port", str(port)] if port is not None else []))


def optuna_dashboard_command(storage: str) -> str:
    """`optuna-dashboard` on the study's storage, bound to this machine only."""
    return tool_command("optuna-dashboard", storage, "--host", "127.0.0.1")


def optuna_dashboard_lines(storage: str) -> tuple[str, str]:
    """The console's dashboard line, and what its "Best Trial" is: Optuna's best is the one highest
    launch, which a lucky draw tops; the sweep answers with a configuration's median (best.json)."""
    command = optuna_dashboard_command(storage)
    if _installed("optuna-dashboard") is None:
        # A development extra: a GPU node's offline bundle, or `pip install specsweep`, has none, and the
        # bare command would not be found.
        pip = shlex.join([*python_argv(), "-m", "pip", "install", "optuna-dashboard"])
        command = f"not installed here (`{pip}`, then `{command}`)"
    return (
        f"Optuna dashboard (live study): {command}",
        "  (its Best Trial is the single highest launch; the sweep's answer, the median of a configuration's "
        "launches, is the console's `best:` line and best.json)",
    )


def checkout() -> Path | None:
    """The source checkout this package runs from, when it runs from one (its Makefile beside it)."""
    root = Path(__file__).resolve().parents[3]
    return root if (root / "Makefile").is_file() else None


def make_target_serves(tracking_uri: str) -> bool:
    """Whether `make mlflow-ui`, typed in the working folder, opens ``tracking_uri``: only in the checkout,
    for its own runs/mlflow.db (the store that target serves). From any other folder, the default --out
    is that folder's runs/, which the target does not open."""
    root = checkout()
    if root is None or Path.cwd().resolve() != root:
        return False
    return tracking_uri == f"sqlite:///{root / 'runs' / 'mlflow.db'}"
