"""The spec's models against what SGLang refuses to build, read from their config.json before any GPU:
a node whose GPU count does not divide the heads, a draft made for another target, weights that alone
exceed the GPUs. Each is exit 2 naming the field, both figures and what would be accepted."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestrator import cli
from orchestrator.spec.search import SpecError
from orchestrator.spec.sweep_spec import load_spec

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "trials" / "demo.yaml"
MODELS = ROOT / "tests" / "fixtures" / "models"  # public models' config.json
LLAMA_8B = ROOT / "trials" / "models" / "llama3-8b-shape"
LLAMA_8B_DRAFT = ROOT / "trials" / "models" / "llama3-8b-eagle3-shape"


def real_spec(tmp_path: Path, target: Path, draft: Path | str, gpus: int, **memory: Any) -> Path:
    data = yaml.safe_load(DEMO.read_text())
    data["backend"] = "sglang"
    data.pop("simulated")
    data["model"].update(path=str(target), draft_path=str(draft))
    data["node"]["gpus"] = gpus
    data["memory"].update(memory)
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize(
    ("target", "draft", "gpus", "heads", "accepted"),
    [
        (LLAMA_8B, LLAMA_8B_DRAFT, 3, "32 attention heads", "1, 2, 4, 8, 16, 32"),
        (MODELS / "qwen2.5-7b", "/models/qwen-draft", 16, "28 attention heads", "1, 2, 4, 28"),
    ],
)
def test_a_node_whose_gpus_do_not_divide_the_heads_is_refused(
    tmp_path: Path, target: Path, draft: str, gpus: int, heads: str, accepted: str
) -> None:
    with pytest.raises(SpecError) as err:
        load_spec(real_spec(tmp_path, target, draft, gpus))
    text = str(err.value)
    assert f"node.gpus: {gpus} (each trial runs with --tp-size {gpus}): {heads}" in text
    assert f"SGLang accepts tp {accepted}" in text


def test_a_draft_made_for_another_target_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as err:
        load_spec(real_spec(tmp_path, MODELS / "llama3.1-70b", LLAMA_8B_DRAFT, 8))
    text = str(err.value)
    assert "model.draft_path: " in text and "hidden states 4096 wide" in text and "are 8192" in text


def test_models_the_driver_cannot_see_are_left_to_the_nodes(tmp_path: Path) -> None:
    spec = load_spec(real_spec(tmp_path, Path("/models/on-the-nodes"), "/models/draft", 3))
    assert spec.node.gpus == 3


def test_the_matching_pair_at_a_good_tp_loads(tmp_path: Path) -> None:
    assert load_spec(real_spec(tmp_path, LLAMA_8B, LLAMA_8B_DRAFT, 2)).node.gpus == 2


def test_weights_bigger_than_the_gpus_are_refused_with_the_tp_that_holds_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """DeepSeek-V3 on a 1-GPU H200 node: exit 2 before Ray starts, naming node.gpus and tp 8."""
    spec = real_spec(tmp_path, MODELS / "deepseek-v3", "/models/DeepSeek-V3-EAGLE3", 1, gpu_memory_mib=143771)
    data = yaml.safe_load(spec.read_text())
    data["model"]["check_paths"] = False  # the draft is on the nodes only
    spec.write_text(yaml.safe_dump(data))
    assert cli.main([str(spec), "--out", str(tmp_path / "runs"), "--no-dashboard"]) == 2
    err = capsys.readouterr().err
    assert "node.gpus: 1: the weights alone (626.94 GiB per GPU at --tp-size 1, the target)" in err
    assert "no fraction fits" in err and "run on nodes of 8 GPUs (node.gpus: 8)" in err
    assert not (tmp_path / "runs").exists()


MISTRAL_24B = ROOT / "trials" / "models" / "mistral-small-24b-shape"
MISTRAL_24B_DRAFT = ROOT / "trials" / "models" / "mistral-small-24b-draft-shape"


def test_a_draft_in_hugging_face_format_under_a_name_sglang_reads_as_mistral_s_own_format_is_refused(
    tmp_path: Path,
) -> None:
    """SGLang (0.5.17, `is_mistral_model`) reads any draft path holding both "eagle" and "mistral" as
    Mistral's native format (params.json): SpecForge's Mistral-Small-24B draft saved as
    ``mistral-small-24b-eagle3-shape/config.json`` failed every speculative launch on the H200 with
    ``FileNotFoundError: File not found ..., params.json``, after the baseline had held the GPU for minutes.
    The spec names the field and the fix; the same folder under another name loads."""
    named = tmp_path / "mistral-small-24b-eagle3"
    named.mkdir()
    (named / "config.json").write_text((MISTRAL_24B_DRAFT / "config.json").read_text())
    with pytest.raises(SpecError) as err:
        load_spec(real_spec(tmp_path, MISTRAL_24B, named, 1))
    text = str(err.value)
    assert f"model.draft_path: {named}:" in text and "params.json" in text
    assert "a path without" in text
    assert load_spec(real_spec(tmp_path, MISTRAL_24B, MISTRAL_24B_DRAFT, 1)).node.gpus == 1
    (named / "params.json").write_text("{}")  # a draft in Mistral's own format is what SGLang expects there
    assert load_spec(real_spec(tmp_path, MISTRAL_24B, named, 1)).node.gpus == 1


def test_the_rule_is_the_one_the_real_failure_showed() -> None:
    """The H200 log of that launch: the draft path it was given holds both words, and SGLang looked for
    params.json there; the rule refuses exactly that path in Hugging Face format."""
    from orchestrator.spec.launch_rules import format_by_name_problem

    log = (ROOT / "tests/fixtures/sglang/0.5.17" / "mistral24b-params-json" / "server.log").read_text()
    draft = log.split("--speculative-draft-model-path ", 1)[1].split()[0]
    assert f"FileNotFoundError: File not found {draft}, params.json" in log
    assert format_by_name_problem(draft, has_config=True, has_params=False) is not None
    assert format_by_name_problem(draft, has_config=True, has_params=True) is None
    assert format_by_name_problem(str(MISTRAL_24B_DRAFT), has_config=True, has_params=False) is None
