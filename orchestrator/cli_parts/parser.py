"""The sweep command's flags (`build_parser`): `python -m orchestrator.sweep [SPEC] ...`, also `specsweep`."""

from __future__ import annotations

import argparse
import shlex

from orchestrator.driver.console.cli_checks import DEFAULT_SPEC
from orchestrator.driver.store.commands import python_argv, tool_argv

MODULE_PROG = "python -m orchestrator.sweep"
SCRIPT_PROG = "specsweep"  # the installed name (pyproject's [project.scripts])


def runnable(prog: str) -> str:
    """The command `prog` names, as it runs from here with no venv activated: the interpreter that runs
    this process with the module, or the installed script beside it (a bare `specsweep` is found only
    where the venv is on PATH)."""
    if prog == SCRIPT_PROG:
        return shlex.join(tool_argv(SCRIPT_PROG))
    return shlex.join([*python_argv(), "-m", "orchestrator.sweep"])


def build_parser(prog: str = MODULE_PROG) -> argparse.ArgumentParser:
    runs = runnable(prog)
    p = argparse.ArgumentParser(
        prog=prog,
        description="Find the fastest SGLang + EAGLE-3 configuration: Optuna proposes, Ray runs one trial "
        "per whole node, MLflow records every trial.",
        epilog=f"Also: `{runs} fit MODEL_DIR [--draft DIR] --gpu-memory-mib N --fraction F [--tp N]` "
        "(one launch's memory per GPU from config.json, before any GPU; --help for its flags) and "
        f"`{runs} report [STUDY]` (a study's HTML report).",
    )
    p.add_argument(
        "spec", nargs="?", default=str(DEFAULT_SPEC), help="sweep spec (YAML); default %(default)s"
    )
    p.add_argument(
        "--trials", type=int, default=None, help="trial budget (default: the spec's budget.trials)"
    )
    p.add_argument(
        "--study", default=None, help="Optuna study and MLflow experiment name (default: spec name)"
    )
    p.add_argument(
        "--ray-address",
        default=None,
        help="join this Ray cluster (e.g. auto, or ray://head:10001); "
        "default: start a local Ray instance that stands for one node",
    )
    p.add_argument(
        "--tracking-uri", default=None, help="MLflow tracking URI (default: sqlite:///OUT/mlflow.db)"
    )
    p.add_argument("--storage", default=None, help="Optuna storage URL (default: sqlite:///OUT/optuna.db)")
    p.add_argument("--out", default="runs", help="folder for logs, the study, reports (default: %(default)s)")
    p.add_argument("--resume", action="store_true", help="continue the study: no trial repeated or lost")
    p.add_argument(
        "--time-budget",
        type=float,
        default=None,
        metavar="SECONDS",
        help="start no new trial after this many seconds; running trials finish (continue with --resume)",
    )
    p.add_argument(
        "--warm-start",
        action="store_true",
        help="seed a new study from earlier sweeps of the same model and GPUs in MLflow: their best "
        "configurations first, their OOM boundary and memory figures learned before any launch (from "
        "sweeps on nodes of another GPU count, the memory figures only, scaled to this tp)",
    )
    p.add_argument("--no-dashboard", action="store_true", help="do not start Ray's dashboard (faster start)")
    p.add_argument("-v", "--verbose", action="store_true", help="log every trial event")
    return p
