"""Every command a sweep prints runs as printed: with no venv activated (a fresh clone's `make sweep` runs
`.venv/bin/python`, and neither a bare `python` nor `mlflow` / `optuna-dashboard` is on the user's PATH),
and from another folder than the checkout.

Seen: the printed `python -m orchestrator.sweep ... --resume` failed with `No module named 'aiohttp'`,
`mlflow ui ...` and `optuna-dashboard ...` were not found, and run from another folder the closing line
sent the user to `make mlflow-ui`, which serves the checkout's runs/ (another study)."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator import cli
from orchestrator.cli_parts.wrap_up import report_command
from orchestrator.driver.store.commands import (
    make_target_serves,
    mlflow_ui_command,
    optuna_dashboard_command,
)
from orchestrator.driver.store.tracking import ui_hint

ROOT = Path(__file__).resolve().parents[3]
# What a new user's shell has: the system's folders, no venv's bin.
BARE_ENV = {"PATH": "/usr/bin:/bin", "HOME": os.environ.get("HOME", "/tmp")}


def executable_of(command: str, cwd: Path) -> Path:
    """The file a shell in ``cwd`` with the bare PATH runs for ``command``'s first word (fails if none)."""
    first = shlex.split(command)[0]
    if os.sep in first:
        path = cwd / first
    else:
        found = [Path(d) / first for d in BARE_ENV["PATH"].split(":") if (Path(d) / first).is_file()]
        assert found, f"{first!r} is not on a new user's PATH ({BARE_ENV['PATH']}): {command}"
        path = found[0]
    assert path.is_file() and os.access(path, os.X_OK), f"{path} cannot be run: {command}"
    return path


def run_as_printed(command: str, cwd: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*shlex.split(command), *extra], cwd=cwd, env=BARE_ENV, capture_output=True, text=True, timeout=120
    )


@pytest.fixture
def elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder outside the checkout, as the working folder."""
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    monkeypatch.chdir(folder)
    return folder


@pytest.mark.slow  # starts the interpreter with the package's imports: seconds
def test_the_command_to_continue_runs_as_printed_from_another_folder(elsewhere: Path) -> None:
    args = cli.build_parser().parse_args(["missing.yaml", "--study", "x2"])
    command = cli.resume_command(args)
    assert Path(os.path.abspath(shlex.split(command)[0])) == Path(os.path.abspath(sys.executable))
    executable_of(command, elsewhere)
    # It runs: the spec is missing here, which the sweep itself refuses, naming it (not an import error).
    proc = run_as_printed(command, elsewhere)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "missing.yaml" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr[-2000:]


@pytest.mark.slow
def test_the_command_that_writes_the_report_runs_as_printed(elsewhere: Path) -> None:
    out = elsewhere / "runs"
    out.mkdir()
    command = report_command(
        "nosuch", out, f"sqlite:///{out / 'mlflow.db'}", f"sqlite:///{out / 'optuna.db'}"
    )
    executable_of(command, elsewhere)
    proc = run_as_printed(command, elsewhere)
    assert "Traceback" not in proc.stderr and "ModuleNotFoundError" not in proc.stderr, proc.stderr[-2000:]
    assert proc.returncode == 2 and proc.stderr.startswith("error: "), proc.stderr[-2000:]


@pytest.mark.parametrize("where", ["checkout", "elsewhere"])
def test_mlflow_and_optuna_dashboard_commands_name_executables_a_new_user_can_run(
    where: str, elsewhere: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cwd = ROOT if where == "checkout" else elsewhere
    monkeypatch.chdir(cwd)
    store = f"sqlite:///{elsewhere / 'runs' / 'mlflow.db'}"
    for command, tool in (
        (mlflow_ui_command(store), "mlflow"),
        (optuna_dashboard_command(f"sqlite:///{elsewhere / 'runs' / 'optuna.db'}"), "optuna-dashboard"),
    ):
        path = executable_of(command, cwd)
        assert path.name == tool
        assert "--host 127.0.0.1" in command, command
    assert f"--backend-store-uri {store}" in mlflow_ui_command(store)


@pytest.mark.slow
def test_the_printed_mlflow_command_runs(elsewhere: Path) -> None:
    command = mlflow_ui_command(f"sqlite:///{elsewhere / 'mlflow.db'}")
    proc = subprocess.run(
        [*shlex.split(command)[:2], "--help"], cwd=elsewhere, env=BARE_ENV, capture_output=True, text=True
    )
    assert proc.returncode == 0 and "--backend-store-uri" in proc.stdout, proc.stderr[-2000:]


def test_the_closing_link_from_another_folder_opens_the_store_the_sweep_wrote(elsewhere: Path) -> None:
    # The sweep ran here with the default --out: runs/ of this folder, not of the checkout.
    store = f"sqlite:///{elsewhere / 'runs' / 'mlflow.db'}"
    assert not make_target_serves(store)
    line = ui_hint(store, "1")
    assert "make mlflow-ui" not in line, line
    command = line.split("`")[1]
    assert f"--backend-store-uri {store}" in command
    executable_of(command, elsewhere)


def test_make_mlflow_ui_is_named_only_in_the_checkout_for_its_own_store(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(ROOT)
    own = f"sqlite:///{ROOT / 'runs' / 'mlflow.db'}"
    assert make_target_serves(own)
    assert "make mlflow-ui" in ui_hint(own, "1")
    assert not make_target_serves(f"sqlite:///{ROOT / 'other' / 'mlflow.db'}")


def test_a_finished_study_names_the_whole_command_that_runs_more_trials(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seen: `to run more trials: --resume --trials N with N above 13`, a fragment that, under `make
    sweep`, is neither a command nor an ARGS value; now the command itself, with a larger budget."""
    from orchestrator.driver.console.study_guard import finished_report

    args = cli.build_parser().parse_args(["trials/demo.yaml", "--study", "d1", "--out", str(tmp_path)])
    monkeypatch.delenv("MAKELEVEL", raising=False)
    text = finished_report("d1", 13, 12, tmp_path, lambda done: cli.resume_command(args, trials=done + 12))
    line = text.splitlines()[-1]
    assert line.startswith("to run more trials: "), line
    command = line.removeprefix("to run more trials: ")
    assert shlex.split(command)[-3:] == ["--resume", "--trials", "25"], command
    parsed = cli.build_parser().parse_args(shlex.split(command)[3:])
    assert parsed.resume and parsed.trials == 25 and parsed.study == "d1" and parsed.out == str(tmp_path)

    monkeypatch.setenv("MAKELEVEL", "1")  # under `make sweep`: the make command, its ARGS one value
    made = cli.resume_command(args, trials=25)
    assert made.startswith("make sweep ARGS=") and "--trials 25" in shlex.split(made)[2]


def test_a_finished_study_says_what_it_found_against_no_speculation(tmp_path: Path) -> None:
    """Seen: the "nothing to do" summary printed `best:` and `confidence:` but not the line between them
    that the sweep's own end printed, the verdict against the server without speculation, the one a
    decision to serve with speculation rests on. The pair's second sweep's best.json holds one."""
    import shutil

    from orchestrator.driver.console.study_guard import finished_report

    best = ROOT / "tests" / "fixtures" / "sglang" / "0.5.17" / "smollm2-sweep-h100-b" / "best.json"
    shutil.copy(best, tmp_path / "best.json")
    lines = finished_report("prod", 6, 10, tmp_path).splitlines()
    against = next(i for i, line in enumerate(lines) if line.startswith("against no speculation: "))
    assert lines[against - 1].startswith("best: ") and lines[against + 1].startswith("confidence: ")
    assert "14.3 % ahead of the server without speculation (trial 0)" in lines[against]
    # the server without speculation as the answer: its verdict is that comparison, said once
    nospec = ROOT / "tests" / "fixtures" / "sglang" / "0.5.17" / "smollm2-sweep-h100" / "best.json"
    shutil.copy(nospec, tmp_path / "best.json")
    text = finished_report("prod", 5, 10, tmp_path)
    assert "speculation does not pay here: without it the server measured 6850.1 tok/s" in text


def test_the_optuna_dashboard_line_says_its_best_trial_is_not_the_answer() -> None:
    """Seen: the dashboard the console points to showed "Best Trial (number=11) 1096.19" in large type,
    where the sweep answered with the median 1071.2 of trials 6, 9, 10, 17, 19; the reason lived only in a
    study attribute on its second page."""
    from orchestrator.driver.store.commands import optuna_dashboard_lines

    lines = optuna_dashboard_lines("sqlite:///runs/optuna.db")
    assert (
        lines[0] == f"Optuna dashboard (live study): {optuna_dashboard_command('sqlite:///runs/optuna.db')}"
    )
    assert "its Best Trial is the single highest launch" in lines[1]
    assert "best.json" in lines[1]


def test_an_optuna_dashboard_not_installed_is_said_with_how_to_install_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seen on a GPU node running the offline bundle (no dev extra): the console printed
    `optuna-dashboard sqlite:////tmp/prod/optuna.db --host 127.0.0.1`, a command not found there. A tool
    that is neither beside the interpreter nor on PATH is said to be missing, with the install command."""
    from orchestrator.driver.store.commands import optuna_dashboard_lines

    python = tmp_path / "venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text("")
    monkeypatch.setattr(sys, "executable", str(python))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    line = optuna_dashboard_lines("sqlite:///runs/optuna.db")[0]
    assert line.startswith("Optuna dashboard (live study): not installed here"), line
    assert f"{python} -m pip install optuna-dashboard" in line, line
    assert "optuna-dashboard sqlite:///runs/optuna.db --host 127.0.0.1" in line, line
