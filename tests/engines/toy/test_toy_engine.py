"""A toy engine registered from this folder alone: the spec accepts it, the launch plan renders its
command, and a whole trial runs on it (its server, its log parser, its endpoints) with no edit outside
the folder. Any place of the product that still spoke SGLang (its module, its log parser, its
`/generate`) would fail the trial here."""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import pytest

from orchestrator.driver.memory.build import prior_applies
from orchestrator.engines import engine_for
from orchestrator.engines.engine import LaunchSettings, TrialLaunch
from orchestrator.engines.launch import launch_plan
from orchestrator.node.trial import TrialRun
from orchestrator.records import TrialStatus
from orchestrator.spec import engine_catalog
from orchestrator.spec.search import make_config
from orchestrator.spec.sweep_spec import NodeKind, SpecError, parse_spec
from orchestrator.trial_events import TrialRequest
from tests.engines.toy.toy_engine import TOY, ToyLogParser
from tests.engines.toy.toy_server import ACCEPT_LENGTH
from tests.engines.toy.toy_spec import ToyNode, toy_data, toy_spec


def test_the_spec_takes_the_registered_engine_and_its_own_flags() -> None:
    spec = toy_spec()
    assert spec.engine == "toy" and spec.node_kind is NodeKind.REAL
    assert engine_for(spec.engine) is TOY
    # Each engine owns its own flags: SGLang's are the toy's to pass through, the toy's are refused.
    data = toy_data()
    data["server"]["flags"] = ["--mem-fraction-static", "0.5"]
    parse_spec(data)
    data["server"]["flags"] = ["--toy-port=1"]
    with pytest.raises(SpecError, match="--toy-port is set by the sweep"):
        parse_spec(data)


def test_the_search_block_is_checked_against_the_toys_own_space() -> None:
    # The toy has no speculative steps: searching them would launch one server under several names.
    data = toy_data()
    data["search"]["speculative_num_steps"] = {"low": 1, "high": 5}
    with pytest.raises(SpecError) as err:
        parse_spec(data)
    words = str(err.value)
    assert "the toy engine has no speculative_num_steps" in words
    assert "mem_fraction_static, max_running_requests" in words


def test_the_toy_sets_no_value_itself_so_its_configurations_keep_what_they_ask() -> None:
    assert engine_catalog.forced("toy") == ()
    asked = make_config(0.5, 1, 4, engine_values={"toy_tick_ms": 1.5}, forced=engine_catalog.forced("toy"))
    assert asked == make_config(0.5, 1, 4, engine_values={"toy_tick_ms": 1.5}, forced=())


def test_the_memory_prior_is_off_for_an_engine_without_memory_defaults() -> None:
    spec = toy_spec()
    assert spec.memory.prior  # the spec asks for it; the toy's space has none of SGLang's defaults
    assert not prior_applies(spec)


@pytest.mark.parametrize(
    "edit, words",
    [
        ({"engine": "vllm"}, "engine: unknown engine 'vllm'; choose one of: "),
        ({"backend": "simulated"}, "simulates SGLang only"),
        ({"backend": "sglang"}, "write backend: real"),
    ],
)
def test_a_bad_engine_names_the_field_and_the_choices(edit: dict[str, str], words: str) -> None:
    data = copy.deepcopy(toy_data())
    data.update(edit)
    if edit.get("backend") == "simulated":
        data["simulated"] = {"profile": "h200-tiny"}
    with pytest.raises(SpecError) as err:
        parse_spec(data)
    assert words in str(err.value)
    if "engine" in edit:
        assert "sglang" in str(err.value) and "toy" in str(err.value)


def test_the_launch_plan_is_the_toys_module_and_flags() -> None:
    spec = toy_spec()
    config = make_config(0.8, 64, 16, 2, 1, 3)
    plan = launch_plan(spec, config, version="1.2", port=4321, tp_size=1, adaptive_config_path="a.json")
    assert plan.argv[:3] == (sys.executable, "-m", "toy_server")
    flags = TOY.flags(
        TrialLaunch(
            LaunchSettings.from_spec(spec),
            config,
            version="1.2",
            port=4321,
            tp_size=1,
            adaptive_config_path="a.json",
        )
    )
    assert plan.argv[3:] == tuple(flags)
    assert "--toy-batch" in flags and not [f for f in flags if f.startswith(("--model-path", "--tp-size"))]


def test_a_whole_trial_runs_on_the_toy_engine(tmp_path: Path) -> None:
    spec = toy_spec()
    request = TrialRequest(
        spec=spec, config=make_config(0.8, 64, 16, 2, 1, 3), number=0, workdir=str(tmp_path)
    )
    run = TrialRun(request, ToyNode(spec, "toy-node"), None)
    assert isinstance(run.parser, ToyLogParser)  # the startup watch reads the toy's log with the toy's parser
    result = run.run()
    assert result.status is TrialStatus.OK, (result.failure, result.log_text[-2000:])
    assert result.command[1:3] == ("-m", "toy_server")
    assert result.server_version == "1.2"
    assert [s.concurrency for s in result.stages] == [2, 4]
    assert all(s.completed > 0 for s in result.stages)
    assert result.server_accept_length == ACCEPT_LENGTH  # read from the toy's own info path
    for served in ("GET /toy/health", "POST /toy/generate", "POST /toy/flush", "GET /toy/info"):
        assert f"toy-server: {served}" in result.log_text
