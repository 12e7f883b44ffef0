"""`specsweep` works from any folder: the default spec is the checkout's, and a spec's relative paths are
read from beside the spec, not from the folder the sweep was started in."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from orchestrator import cli
from orchestrator.spec.sweep_spec import load_spec

ROOT = Path(__file__).resolve().parents[1]


def test_the_default_spec_is_found_from_another_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)  # no trials/ here
    # --resume of a study that does not exist: refused only once the spec has loaded.
    assert cli.main(["--resume", "--out", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err
    assert "no such spec file" not in err and "no study 'demo'" in err


def test_a_profile_file_is_read_from_beside_the_spec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "node.yaml").write_text(yaml.safe_dump({"base": "h200-tiny"}))
    data = yaml.safe_load((ROOT / "trials" / "demo.yaml").read_text())
    data["simulated"]["profile"] = "node.yaml"
    data["node"]["gpus"] = 1  # the profile's node has one GPU
    (specs / "mine.yaml").write_text(yaml.safe_dump(data))
    monkeypatch.chdir(tmp_path)
    spec = load_spec(specs / "mine.yaml")
    assert spec.simulated is not None and spec.simulated.profile == str(specs / "node.yaml")
    assert cli.resolve_profile(spec) is not None
