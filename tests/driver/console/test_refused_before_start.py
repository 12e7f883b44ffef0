"""What the sweep accepted silently, refused before anything starts (exit 2, naming the field and the fix):
`--resume --warm-start` (the warm start was ignored), a real model's folder without its config.json (it
ended in `node.gpus: ... 0 GPU(s) seen by Ray`), and a folder given as the spec (it suggested a file that
does not exist)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from orchestrator import cli
from orchestrator.spec.search import SpecError
from orchestrator.spec.sweep_spec import load_spec

ROOT = Path(__file__).resolve().parents[3]
DEMO = ROOT / "trials" / "demo.yaml"


def test_resume_with_warm_start_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = cli.main([str(DEMO), "--out", str(tmp_path / "runs"), "--resume", "--warm-start"])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("error: --warm-start: "), err
    assert "--resume" in err and "--study" in err  # the fix: a new study to seed
    assert not (tmp_path / "runs").exists()


def real_spec(tmp_path: Path, model: Path) -> Path:
    data = yaml.safe_load(DEMO.read_text())
    data.update(backend="sglang")
    del data["simulated"]
    data["node"]["gpus"] = 1
    data["model"].update(path=str(model), draft_path=str(ROOT / "trials/models/tiny-llama-eagle3"))
    spec = tmp_path / "real.yaml"
    spec.write_text(yaml.safe_dump(data))
    return spec


def test_a_real_model_folder_without_config_json_is_named_before_ray_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "model.safetensors").write_bytes(b"")
    rc = cli.main([str(real_spec(tmp_path, model)), "--out", str(tmp_path / "runs")])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert f"model.path: {model / 'config.json'}" in err and "not found" in err, err
    assert "GPU(s) seen by Ray" not in err and not (tmp_path / "runs").exists()


def test_a_folder_given_as_the_spec_suggests_files_it_holds(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as err:
        load_spec(ROOT / "trials")
    suggested = re.findall(r"(\S+\.yaml)", str(err.value))
    assert suggested and all(Path(s).is_file() for s in suggested), str(err.value)
    with pytest.raises(SpecError) as err:
        load_spec(ROOT / "trials" / "models")  # holds no spec
    message = str(err.value)
    assert all(Path(s).is_file() for s in re.findall(r"(\S+\.yaml)", message)), message
    assert "no .yaml file" in message, message
