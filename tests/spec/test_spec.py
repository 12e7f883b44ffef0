"""Bad input gets one clear error naming the field, before any GPU is claimed."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml

from orchestrator.spec.engine_catalog import EngineName
from orchestrator.spec.search import SpecError, make_config
from orchestrator.spec.sweep_spec import Backend, NodeKind, load_spec, parse_spec

DEMO = Path(__file__).resolve().parents[2] / "trials" / "demo.yaml"


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
            "must be at least 1, got -3",
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


def test_malformed_yaml_is_placed_in_the_file_not_in_a_parser_placeholder(tmp_path: Path) -> None:
    """Seen: "malformed YAML: mapping values are not allowed here" then `in "<unicode string>", line 3,
    column 6:`, PyYAML's name for a string it was handed; the file was named already."""
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nworkload:\n  a: b: c\n")
    with pytest.raises(SpecError) as err:
        load_spec(bad)
    text = str(err.value)
    assert "<unicode string>" not in text
    assert f"{bad}: malformed YAML at line 3, column 7: mapping values are not allowed here" in text
    assert "a: b: c" in text  # the line, with the caret under the place


def test_malformed_yaml_at_the_end_of_the_file_shows_where_the_unclosed_part_began(tmp_path: Path) -> None:
    """Seen: "malformed YAML at line 3, column 1: expected ',' or ']', but got '<stream end>'", then an
    empty line and a lone caret: the place is past the last line, and the line to show is where the
    unclosed list began."""
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: demo\nbackend: [simulated\n")
    with pytest.raises(SpecError) as err:
        load_spec(bad)
    text = str(err.value)
    assert "at the end of the file" in text
    assert "line 2, column 10" in text
    assert "backend: [simulated" in text  # the line where the list was opened, with the caret under it


def test_missing_file() -> None:
    with pytest.raises(SpecError, match="no such spec file"):
        load_spec("trials/does-not-exist.yaml")


def test_flags_string_is_refused_with_the_list_to_write() -> None:
    # The README says never a shell string: it was split silently instead.
    data = demo_data()
    data["server"]["flags"] = "--attention-backend triton --log-level 'warning'"
    with pytest.raises(SpecError) as err:
        parse_spec(data)
    assert "server.flags: a list of arguments, not a shell string" in str(err.value)
    assert '["--attention-backend", "triton", "--log-level", "warning"]' in str(err.value)


def test_topk1_forces_draft_tokens() -> None:
    assert make_config(0.8, 64, 48, 3, 1, 16).speculative_num_draft_tokens == 4
    assert make_config(0.8, 64, 48, 3, 4, 8).speculative_num_draft_tokens == 8
    assert not make_config(0.8, 64, 48).speculative
    with pytest.raises(SpecError, match="speculative_eagle_topk"):
        make_config(0.8, 64, 48, 3, None, None)


def _known(**changes: Any) -> dict[str, Any]:
    data = copy.deepcopy(demo_data())
    data["known_good"][0].update(changes)
    return data


@pytest.mark.parametrize(
    ("data", "field", "hint"),
    [
        # Outside a `choices` list: Optuna cannot enqueue it, and the sweep crashed after Ray started.
        (_known(cuda_graph_max_bs=100), "known_good.0.cuda_graph_max_bs", "one of"),
        (_known(speculative_eagle_topk=3), "known_good.0.speculative_eagle_topk", "one of"),
        # Outside low..high, or off the step grid.
        (_known(mem_fraction_static=0.6), "known_good.0.mem_fraction_static", "0.7"),
        (_known(mem_fraction_static=0.885), "known_good.0.mem_fraction_static", "step"),
        (_known(speculative_num_steps=9), "known_good.0.speculative_num_steps", "1..5"),
        # Top-k 1 means steps + 1 draft tokens: SGLang would run 4, not the 7 the user wrote.
        (_known(speculative_num_draft_tokens=7), "known_good.0.speculative_num_draft_tokens", "steps + 1"),
        # Top-k 2 x 3 steps: a draft tree of at most 7 tokens.
        (
            _known(speculative_eagle_topk=2, speculative_num_draft_tokens=9),
            "known_good.0.speculative_num_draft_tokens",
            "7",
        ),
        # The demo searches adaptive speculation off only, and a mode must be one of the three.
        (_known(speculative_adaptive="tiers"), "known_good.0.speculative_adaptive", "widen search."),
        (
            _known(speculative_adaptive="sometimes"),
            "known_good.0.speculative_adaptive",
            "off",
        ),
    ],
)
def test_known_good_outside_the_space_is_refused(data: dict[str, Any], field: str, hint: str) -> None:
    with pytest.raises(SpecError) as err:
        parse_spec(data, "demo.yaml")
    assert field in str(err.value)
    assert hint in str(err.value)


@pytest.mark.parametrize("step", [0, -0.01])
def test_float_step_must_be_positive(step: float) -> None:
    data = copy.deepcopy(demo_data())
    data["search"]["mem_fraction_static"]["step"] = step
    with pytest.raises(SpecError, match=r"search.mem_fraction_static.*step"):
        parse_spec(data, "demo.yaml")


def test_int_step_zero_names_the_field() -> None:
    data = copy.deepcopy(demo_data())
    data["search"]["speculative_num_steps"] = {"low": 1, "high": 5, "step": 0}
    with pytest.raises(SpecError, match=r"search.speculative_num_steps.*step"):
        parse_spec(data, "demo.yaml")


def test_known_good_inside_the_space_is_accepted() -> None:
    spec = parse_spec(_known(speculative_eagle_topk=2, speculative_num_draft_tokens=6))
    assert spec.known_good[0].to_config().speculative_num_draft_tokens == 6


def test_a_known_good_names_its_runtime_speculation_policy() -> None:
    from orchestrator.driver.loop.restore import enqueue_first
    from orchestrator.driver.search.space import suggest_config

    data = _known(speculative_eagle_topk=1, speculative_num_steps=3, speculative_adaptive="default")
    data["search"]["speculative_adaptive"] = ["off", "default", "tiers"]
    data["search"]["speculative_eagle_topk"] = {"choices": [1, 2]}
    data["budget"]["baseline"] = False
    spec = parse_spec(data)
    config = spec.known_good[0].to_config()
    assert config.speculative_adaptive == "default"
    assert config.speculative_num_steps == 7  # launched at SGLang's largest default tier

    # Enqueued with the values the user wrote (inside the space), so Optuna rebuilds the same launch.
    study = optuna.create_study()
    enqueue_first(study, spec)
    trial = study.ask()
    assert suggest_config(trial, spec.search) == config
    assert trial.params["speculative_num_steps"] == 3

    data["known_good"][0]["speculative_eagle_topk"] = 2
    data["known_good"][0]["speculative_num_draft_tokens"] = 5
    with pytest.raises(SpecError, match=r"known_good.0.speculative_adaptive.*top-k 1"):
        parse_spec(data)


def test_stages_default_to_what_real_hardware_needs_and_short_ones_are_named_in_one_warning() -> None:
    from orchestrator.spec.workload_warnings import short_stage_warning

    data = demo_data()
    for key in ("min_stage_s", "min_stage_tokens"):
        data["workload"].pop(key, None)
    for key in ("confirm_top", "confirm_repeats"):
        data["budget"].pop(key, None)
    spec = parse_spec(data)
    assert (spec.workload.min_stage_s, spec.workload.min_stage_tokens) == (20.0, 5000)
    assert (spec.budget.confirm_top, spec.budget.confirm_repeats) == (3, 3)
    assert short_stage_warning(spec) == ""
    demo = load_spec(DEMO)  # sets both below the defaults, on purpose
    # The simulated node has no ramp-up to outlast: the demo says nothing on every run.
    assert short_stage_warning(demo) == ""
    on_gpus = demo.model_copy(update={"backend": Backend.SGLANG, "simulated": None})
    warning = short_stage_warning(on_gpus)
    assert warning.startswith("warning:") and warning.count("\n") == 0
    assert "workload.min_stage_s" in warning and "workload.min_stage_tokens" in warning
    # Enough tokens from the prompts themselves: only the duration is named.
    data["workload"].update(min_stage_s=1, min_stage_tokens=0, num_prompts=100, output_len=64)
    data["backend"] = "sglang"
    data.pop("simulated")
    only_time = short_stage_warning(parse_spec(data))
    assert "workload.min_stage_s" in only_time and "min_stage_tokens" not in only_time


@pytest.mark.parametrize(("key", "value"), [("min_stage_s", -1), ("min_stage_tokens", -5)])
def test_negative_stage_minimums_are_refused_by_name(key: str, value: float) -> None:
    data = demo_data()
    data["workload"][key] = value
    with pytest.raises(SpecError, match=f"workload.{key}"):
        parse_spec(data)


def test_every_setting_of_the_demo_spec_is_commented() -> None:
    """The README sends users to trials/demo.yaml for what each key means."""
    lines = (Path(__file__).resolve().parents[2] / "trials" / "demo.yaml").read_text().splitlines()
    bare = []
    for i, line in enumerate(lines):
        key = re.match(r"^\s*([a-z_]+):\s*(\S.*)?$", line)
        # a comment, a section header, or the next line of a mapping written inline
        if key is None or key.group(2) is None or lines[i - 1].rstrip().endswith(","):
            continue
        if "#" not in line and not lines[i - 1].lstrip().startswith("#"):
            bare.append(key.group(1))
    assert not bare, f"keys without a comment: {bare}"


SPEC_FILES = sorted(
    p
    for folder in ("trials", "tests")
    for p in (DEMO.parents[1] / folder).rglob("*.yaml")
    if re.search(r"^backend:", p.read_text(), re.MULTILINE)
)


@pytest.mark.parametrize("path", SPEC_FILES, ids=lambda p: str(p.relative_to(DEMO.parents[1])))
def test_every_spec_without_an_engine_key_means_sglang_on_its_node_kind(path: Path) -> None:
    # Specs written before `engine:` existed read as they did: `backend: simulated` is SGLang simulated,
    # `backend: sglang` SGLang on real GPUs.
    data = yaml.safe_load(path.read_text())
    assert "engine" not in data
    try:
        spec = load_spec(path)
    except SpecError:
        pytest.skip("a spec that is invalid on purpose")
    assert spec.engine == EngineName.SGLANG
    assert spec.node_kind is (NodeKind.SIMULATED if data["backend"] == "simulated" else NodeKind.REAL)


def test_backend_real_is_sglangs_real_node_and_the_engine_may_be_named() -> None:
    data = demo_data()
    data.pop("simulated")
    kinds = set()
    for backend, engine in (("sglang", None), ("real", None), ("real", "sglang"), ("sglang", "sglang")):
        data["backend"] = backend
        data.pop("engine", None)
        if engine:
            data["engine"] = engine
        spec = parse_spec(data)
        kinds.add((spec.engine, spec.node_kind))
    assert kinds == {(EngineName.SGLANG, NodeKind.REAL)}
