"""`specsweep fit ...` and `specsweep report ...` beside `specsweep [SPEC]`: the memory command and the
report under the installed name, with `python -m orchestrator.sweep SPEC` and `specsweep SPEC` as before."""

from __future__ import annotations

import json
import shlex
import tomllib
from pathlib import Path

import pytest

from orchestrator import cli
from orchestrator.driver.store.commands import python_argv, tool_argv

ROOT = Path(__file__).resolve().parents[1]
TARGET = str(ROOT / "trials/models/llama3-8b-shape")


def test_the_installed_name_is_the_cli() -> None:
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["specsweep"] == "orchestrator.cli:main"


def test_fit_runs_the_memory_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["fit", TARGET, "--gpu-memory-mib", "143771", "--fraction", "0.85", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["kv_tokens"] > 800_000


def test_fit_refuses_as_the_memory_command_does(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["fit", TARGET, "--gpu-memory-mib", "143771", "--fraction", "0.85", "--tp", "3"]) == 2
    assert "--tp 3: 32 attention heads" in capsys.readouterr().err


def test_fit_help_names_the_short_command(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("sys.argv", ["/opt/env/bin/specsweep", "fit", "--help"])
    with pytest.raises(SystemExit) as done:
        cli.main(["fit", "--help"])
    assert done.value.code == 0
    assert capsys.readouterr().out.startswith("usage: specsweep fit")


def test_report_runs_the_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["report", "--out", str(tmp_path)]) == 2  # no study there yet: the report's own error
    err = capsys.readouterr().err
    assert "error: no study in sqlite:///" in err and "run a sweep first" in err


@pytest.mark.parametrize("argv0", ["/src/orchestrator/sweep.py", "/opt/env/bin/specsweep"])
def test_the_sweep_help_names_both_as_they_run(
    argv0: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Seen: `--help` of a fresh clone's `.venv/bin/python -m orchestrator.sweep` named `specsweep report
    [STUDY]`, which no shell without the venv activated finds. Each is named as it runs from here: the
    interpreter that runs the sweep with the module, or the installed script beside it."""
    monkeypatch.setattr("sys.argv", [argv0, "--help"])
    with pytest.raises(SystemExit):
        cli.main()
    out = " ".join(capsys.readouterr().out.split())
    if argv0.endswith("specsweep"):
        runs = shlex.join(tool_argv("specsweep"))
    else:
        runs = shlex.join([*python_argv(), "-m", "orchestrator.sweep"])
    assert f"`{runs} fit MODEL_DIR" in out and f"`{runs} report [STUDY]`" in out


def test_a_spec_file_named_fit_is_still_a_spec(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "fit").write_text("name: [unclosed\n")
    assert cli.main(["fit", "--out", str(tmp_path / "runs")]) == 2
    assert "fit: malformed YAML" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv0", "usage"),
    [
        ("/opt/env/bin/specsweep", "usage: specsweep "),
        ("/src/orchestrator/sweep.py", "usage: python -m orchestrator.sweep "),
    ],
)
def test_help_names_the_command_the_user_typed(
    argv0: str, usage: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Seen: `specsweep --help` printed `usage: python -m orchestrator.sweep`.
    monkeypatch.setattr("sys.argv", [argv0, "--help"])
    with pytest.raises(SystemExit) as done:
        cli.main()
    assert done.value.code == 0
    assert capsys.readouterr().out.startswith(usage)


@pytest.mark.parametrize("name", ["fit", "report"])
def test_a_subcommand_s_usage_names_the_command_as_typed(
    name: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Seen: `.venv/bin/python -m orchestrator.sweep fit --help` printed `usage: specsweep fit ...`, a
    command that shell did not have."""
    monkeypatch.setattr("sys.argv", ["/src/orchestrator/sweep.py", name, "--help"])
    with pytest.raises(SystemExit):
        cli.main()
    assert capsys.readouterr().out.startswith(f"usage: python -m orchestrator.sweep {name}")


def test_the_report_names_another_study_with_a_command_that_runs() -> None:
    """Seen: `.venv/bin/specsweep report` said "(name another: specsweep report NAME)", which a shell
    without the venv on PATH does not find."""
    from orchestrator.report.page import another_study_command

    assert another_study_command("specsweep report") == shlex.join(tool_argv("specsweep")) + " report NAME"
    assert another_study_command("python -m orchestrator.sweep report") == shlex.join(
        [*python_argv(), "-m", "orchestrator.report", "NAME"]
    )
