"""Bad input gets one clear error naming the field, before any GPU is claimed."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestrator.spec import SpecError, load_spec, make_config, parse_spec

DEMO = Path(__file__).resolve().parents[1] / "trials" / "demo.yaml"


def demo_data() -> dict[str, Any]:
    data = yaml.safe_load(DEMO.read_text())
    assert isinstance(data, dict)
    return data


def test_demo_spec_loads() -> None:
    spec = load_spec(DEMO)
    assert spec.backend.value == "simulated"
    assert spec.workload.concurrency == sorted(spec.workload.concurrency)


@pytest.mark.parametrize(
    ("mutate", "field", "hint"),
    [
        (lambda d: d.update(bogus=1), "bogus", "unknown key"),
        (
            lambda d: d["search"].update(mem_fraction_static={"low": 0.5, "high": 1.2}),
            "mem_fraction_static",
            "strictly between 0 and 1",
        ),
        (
            lambda d: d["workload"].update(num_prompts=-3),
            "workload.num_prompts",
            "greater than or equal to 1",
        ),
        (
            lambda d: d["search"].update(cuda_graph_max_bs={"low": 64, "high": 16}),
            "cuda_graph_max_bs",
            "swap",
        ),
        (lambda d: d["search"].update(max_running_requests={"choices": []}), "max_running_requests", ""),
        (
            lambda d: d["server"].update(flags=["--mem-fraction-static", "0.9"]),
            "server.flags",
            "set by the sweep",
        ),
        (lambda d: d["search"].pop("speculative_num_steps"), "search.speculative_num_steps", "required"),
        (lambda d: d["workload"].update(concurrency=[]), "workload.concurrency", ""),
        (lambda d: d.update(backend="vllm"), "backend", ""),
        (
            lambda d: d["known_good"][0].update(mem_fraction_static=1.5),
            "known_good.0.mem_fraction_static",
            "",
        ),
    ],
)
def test_bad_spec_names_the_field(mutate: Any, field: str, hint: str) -> None:
    data = copy.deepcopy(demo_data())
    mutate(data)
    with pytest.raises(SpecError) as err:
        parse_spec(data, "demo.yaml")
    text = str(err.value)
    assert field in text
    assert hint in text


def test_malformed_yaml(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nsearch: [unclosed\n")
    with pytest.raises(SpecError, match="malformed YAML"):
        load_spec(bad)


def test_missing_file() -> None:
    with pytest.raises(SpecError, match="no such spec file"):
        load_spec("trials/does-not-exist.yaml")


def test_flags_string_is_split_not_shelled() -> None:
    data = demo_data()
    data["server"]["flags"] = "--attention-backend triton --log-level 'warning'"
    spec = parse_spec(data)
    assert spec.server.flags == ["--attention-backend", "triton", "--log-level", "warning"]


def test_topk1_forces_draft_tokens() -> None:
    assert make_config(0.8, 64, 48, 3, 1, 16).speculative_num_draft_tokens == 4
    assert make_config(0.8, 64, 48, 3, 4, 8).speculative_num_draft_tokens == 8
    assert not make_config(0.8, 64, 48).speculative
    with pytest.raises(SpecError, match="speculative_eagle_topk"):
        make_config(0.8, 64, 48, 3, None, None)


def test_every_setting_of_the_demo_spec_is_commented() -> None:
    """The README sends users to trials/demo.yaml for what each key means."""
    lines = (Path(__file__).resolve().parents[1] / "trials" / "demo.yaml").read_text().splitlines()
    bare = []
    for i, line in enumerate(lines):
        key = re.match(r"^\s*([a-z_]+):\s*(\S.*)?$", line)
        # a comment, a section header, or the next line of a mapping written inline
        if key is None or key.group(2) is None or lines[i - 1].rstrip().endswith(","):
            continue
        if "#" not in line and not lines[i - 1].lstrip().startswith("#"):
            bare.append(key.group(1))
    assert not bare, f"keys without a comment: {bare}"
