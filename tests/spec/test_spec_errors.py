"""Bad spec fields in plain words: each line names the field, what was given and what would be accepted,
never pydantic's own phrasing (a regular expression, `list[WeightedDataset]`, "after validation")."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestrator.bench.traffic import check_workload
from orchestrator.spec.search import SpecError
from orchestrator.spec.sweep_spec import load_spec, parse_spec
from orchestrator.spec.workload_warnings import few_prompts_warning

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "trials" / "demo.yaml"
PYDANTIC_WORDS = ("should match pattern", "after validation", "list[", "valid string", "valid list", "0.0")


def error_of(edit: Any) -> str:
    data = copy.deepcopy(yaml.safe_load(DEMO.read_text()))
    edit(data)
    with pytest.raises(SpecError) as err:
        parse_spec(data, "spec.yaml")
    return str(err.value)


def workload(**fields: Any) -> Any:
    return lambda d: d["workload"].update(fields)


@pytest.mark.parametrize(
    ("edit", "line"),
    [
        (
            lambda d: d.update(name="my study"),
            "  - name: got 'my study'; give a plain name: letters, digits, '_', '.' and '-', starting "
            "with a letter or digit",
        ),
        (
            workload(concurrency=[]),
            "  - workload.concurrency: got an empty list; give at least 1 item, e.g. [8, 16]",
        ),
        (
            lambda d: d["search"].update(max_running_requests={"choices": []}),
            "  - search.max_running_requests: choices: got an empty list; give at least 1 item, "
            "e.g. [32, 64]",
        ),
        # Seen: top-k's example was the graph batches' [64, 128]. Each field has its own.
        (
            lambda d: d["search"].update(speculative_eagle_topk={"choices": []}),
            "  - search.speculative_eagle_topk: choices: got an empty list; give at least 1 item, "
            "e.g. [1, 4]",
        ),
        (
            lambda d: d["search"].update(mem_fraction_static={"choices": []}),
            "  - search.mem_fraction_static: choices: got an empty list; give at least 1 item, "
            "e.g. [0.85, 0.9]",
        ),
        (
            workload(dataset=[{"source": "random", "weight": 0}]),
            "  - workload.dataset.0.weight: must be above 0, got 0",
        ),
        (
            workload(dataset={"sharegpt": "data/sharegpt.json"}),
            "  - workload.dataset: got a mapping {'sharegpt': 'data/sharegpt.json'}; give one dataset as a "
            "string (random, generated-chat, 'sharegpt: PATH' or 'jsonl: PATH'), or a list of {source: ..., "
            "weight: ...} mixed by weight; write it on one line, quoted: "
            'dataset: "sharegpt: data/sharegpt.json"',
        ),
        (
            workload(dataset=None),
            "  - workload.dataset: got nothing (an empty value); give one dataset as a string",
        ),
        (
            lambda d: d["search"].update(speculative_eagle_topk={"choices": [0, 1]}),
            "  - search.speculative_eagle_topk: values must be whole numbers of at least 1; "
            "choices [0, 1] has 0",
        ),
        (
            lambda d: d["known_good"][0].update(speculative_eagle_topk=0),
            "  - known_good.0.speculative_eagle_topk: must be at least 1, got 0",
        ),
        (lambda d: d["node"].update(gpus="eight"), "  - node.gpus: must be a whole number, got 'eight'"),
        (
            lambda d: d["model"].update(speculative_algorithm="MEDUSA"),
            "  - model.speculative_algorithm: must be 'EAGLE3' or 'EAGLE', got 'MEDUSA'",
        ),
        (
            lambda d: d["simulated"].update(profile=5),
            "  - simulated.profile: got 5; give a built-in profile name, a YAML file's path, or a mapping",
        ),
    ],
)
def test_each_line_names_the_field_the_value_and_what_is_accepted(edit: Any, line: str) -> None:
    text = error_of(edit)
    assert line in text, text
    assert len(text.splitlines()) == 2, text  # one line for the one mistake: no other member's complaint
    for words in PYDANTIC_WORDS:
        assert words not in text, text


def test_a_dataset_path_that_is_a_folder_says_folder(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "sharegpt.json").write_text("[]")
    data = yaml.safe_load(DEMO.read_text())
    data["workload"]["dataset"] = "sharegpt: data"
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(yaml.safe_dump(data))
    with pytest.raises(SpecError) as err:
        check_workload(load_spec(spec_path))
    text = str(err.value)
    assert f"{tmp_path / 'data'} is a folder, not a dataset file; name the file in it (sharegpt.json)" in text
    assert "no such" not in text


def test_from_a_shell_exit_2_before_ray(tmp_path: Path) -> None:
    data = yaml.safe_load(DEMO.read_text())
    data["workload"]["concurrency"] = []
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(data))
    done = subprocess.run(
        [sys.executable, "-m", "orchestrator.sweep", str(bad), "--out", str(tmp_path / "runs")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
        timeout=120,
    )
    assert done.returncode == 2
    assert "workload.concurrency: got an empty list; give at least 1 item" in done.stderr
    assert not (tmp_path / "runs").exists()


# Accepted silently before: each ran and was reported as if it had measured what the spec asked.
@pytest.mark.parametrize(
    ("edit", "named", "fix"),
    [
        (  # reported as `512 concurrent: ... 1024.8 tok/s` while at most 64 requests ever ran
            workload(concurrency=[8, 512], num_prompts=512),
            "workload.concurrency",
            "at most 64",
        ),
        (  # a step wider than the range: only 0.70 was ever searched
            lambda d: d["search"].update(mem_fraction_static={"low": 0.70, "high": 0.95, "step": 0.5}),
            "search.mem_fraction_static",
            "at most 0.25",
        ),
        (
            lambda d: d["search"].update(speculative_num_steps={"low": 1, "high": 5, "step": 8}),
            "search.speculative_num_steps",
            "at most 4",
        ),
    ],
)
def test_what_would_run_something_else_than_asked_is_refused_naming_the_field(
    edit: Any, named: str, fix: str
) -> None:
    message = error_of(edit)
    assert named in message and fix in message, message


def test_fewer_prompts_than_requests_in_flight_is_warned_naming_the_field() -> None:
    # Legitimate where a stage cycles its prompts, but then copies of one prompt run at once: said.
    data = yaml.safe_load(DEMO.read_text())
    data["workload"].update(num_prompts=4)
    warning = few_prompts_warning(parse_spec(data, "spec.yaml"))
    assert warning.startswith("warning: workload.num_prompts 4 ") and "at least 16" in warning, warning
    assert few_prompts_warning(load_spec(DEMO)) == ""


def test_a_concurrency_some_searched_max_running_requests_holds_is_accepted() -> None:
    data = yaml.safe_load(DEMO.read_text())
    data["workload"].update(concurrency=[8, 48], num_prompts=48)  # 48 and 64 hold it, 16 and 32 do not
    assert parse_spec(data, "spec.yaml").workload.concurrency == [8, 48]
    data["search"]["mem_fraction_static"] = {"low": 0.88, "high": 0.88, "step": 0.01}  # one value, on purpose
    parse_spec(data, "spec.yaml")


def test_adaptive_speculation_with_no_top_k_of_1_is_refused_before_its_known_good_entries() -> None:
    """Seen: `speculative_adaptive: [tiers]` with top-k choices [2, 4] was told only that the known-good
    entry's `off` was not searched; with that changed, the spec was accepted and no configuration of it
    could run (SGLang runs adaptive speculation with top-k 1 only)."""
    data = yaml.safe_load(DEMO.read_text())
    data["search"]["speculative_adaptive"] = ["tiers"]
    data["search"]["speculative_eagle_topk"] = {"choices": [2, 4]}
    with pytest.raises(SpecError) as err:
        parse_spec(data)
    text = str(err.value)
    assert "search.speculative_adaptive" in text and "top-k 1 only" in text, text
    assert "add off to search.speculative_adaptive, or 1 to search.speculative_eagle_topk" in text, text
    data["search"]["speculative_adaptive"] = ["off", "tiers"]  # off searched: the top-k 2 and 4 trees run
    data["known_good"] = []
    parse_spec(data)
