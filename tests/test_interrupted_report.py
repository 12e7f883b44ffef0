"""Ctrl-C while the report is written (its parameter importances take seconds on a large study): the
sweep's results are all kept, the report is skipped with the command that writes it, and no traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator import cli

DEMO = Path(__file__).resolve().parents[1] / "trials" / "demo.yaml"


@pytest.mark.slow  # one launch of the demo on the simulated node
def test_ctrl_c_while_the_report_is_written_skips_it_and_keeps_the_rest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import orchestrator.report

    def interrupted(*_: object) -> Path:
        raise KeyboardInterrupt

    monkeypatch.setattr(orchestrator.report, "write_report", interrupted)
    out = tmp_path / "runs"
    rc = cli.main([str(DEMO), "--out", str(out), "--trials", "1", "--no-dashboard", "--study", "ctrlc"])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    assert "report skipped (interrupted)" in captured.out + captured.err
    assert "python -m orchestrator.report ctrlc" in captured.out + captured.err
    assert "Traceback" not in captured.out + captured.err
    assert (out / "ctrlc" / "best.json").is_file() and (out / "ctrlc" / "summary.json").is_file()
