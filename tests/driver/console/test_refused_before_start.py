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


def demo_with(tmp_path: Path, **changes: object) -> Path:
    """The demo spec with ``node.gpus`` and ``model.speculative_algorithm`` changed as given."""
    data = yaml.safe_load(DEMO.read_text())
    if "gpus" in changes:
        data["node"]["gpus"] = changes["gpus"]
    if "algorithm" in changes:
        data["model"]["speculative_algorithm"] = changes["algorithm"]
    spec = tmp_path / "demo-changed.yaml"
    spec.write_text(yaml.safe_dump(data))
    return spec


def refusal(tmp_path: Path, spec: Path, capsys: pytest.CaptureFixture[str]) -> str:
    rc = cli.main([str(spec), "--out", str(tmp_path / "runs"), "--no-dashboard"])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert not (tmp_path / "runs").exists()  # before Ray, MLflow or a study folder
    return err


def test_more_gpus_than_the_simulated_node_has_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`node.gpus: 16` on the 8-GPU demo node launched, and every trial failed with SGLang's last words
    ("Received sigquit from a child process"), the cause ("invalid device ordinal") only in the log."""
    err = refusal(tmp_path, demo_with(tmp_path, gpus=16), capsys)
    assert err.startswith("error: node.gpus: 16: the simulated node 'kimi-k25-rtxpro6000' has 8 GPUs"), err
    assert "set node.gpus to at most 8" in err


def test_weights_that_fill_every_gpu_of_the_simulated_node_are_refused_with_the_gpus_that_hold_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`node.gpus: 3` (here 4, which splits the node) for a model whose weights need more: Ray started,
    every trial was predicted OOM, and the sweep advised a higher mem_fraction_static and a smaller
    cuda_graph_max_bs."""
    err = refusal(tmp_path, demo_with(tmp_path, gpus=4), capsys)
    assert err.startswith("error: node.gpus: 4: the weights alone ("), err
    assert "no fraction fits" in err and "(node.gpus: 8)" in err, err
    assert "mem_fraction_static" not in err


def test_an_eagle3_draft_under_eagle_is_refused_on_the_simulated_node(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The demo's comment promises it; the check read only a draft's config.json, which the simulated node
    has none of, so the sweep launched and found an acceptance length of 1.01 ("BROKEN SPECULATION")."""
    err = refusal(tmp_path, demo_with(tmp_path, algorithm="EAGLE"), capsys)
    assert err.startswith("error: model.speculative_algorithm: "), err
    assert "EAGLE-3 draft" in err and "Set speculative_algorithm: EAGLE3" in err


def test_a_gpu_count_that_does_not_split_the_simulated_node_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`node.gpus: 7` on the 8-GPU demo node launched and answered with `--tp-size 7`, which no model whose
    heads 8 GPUs split would load."""
    err = refusal(tmp_path, demo_with(tmp_path, gpus=7), capsys)
    assert err.startswith("error: node.gpus: 7: "), err
    assert "1, 2, 4 or 8" in err, err
