"""The warning for searched values an engine serves as one server: valid, but they measure less than they
look (each server is launched once; the other names are answered from its record)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from orchestrator.spec.search_warnings import one_server_warnings
from orchestrator.spec.sweep_spec import parse_spec
from tests.engines.toy.toy_spec import toy_data

ROOT = Path(__file__).resolve().parents[2]


def _demo(**search: Any) -> dict[str, Any]:
    data = yaml.safe_load((ROOT / "trials" / "demo.yaml").read_text())
    data["search"].update(search)
    return data


def test_graph_batches_at_or_above_every_max_running_are_one_server() -> None:
    spec = parse_spec(_demo(), "demo.yaml")  # graph bs 64-512, max running 16-64
    (warning,) = one_server_warnings(spec)
    assert warning.startswith("note: search.cuda_graph_max_bs: 64, 128, 256 and 512 are one server")
    assert "at most 64" in warning and "search.max_running_requests" in warning


def test_values_the_engine_serves_apart_have_no_warning() -> None:
    spec = parse_spec(_demo(cuda_graph_max_bs={"choices": [8, 16, 32, 512]}), "demo.yaml")
    assert one_server_warnings(spec) == []
    # one value above the largest max running is a server of its own
    spec = parse_spec(_demo(cuda_graph_max_bs={"choices": [16, 512]}), "demo.yaml")
    assert one_server_warnings(spec) == []
    # and one at the largest max running is that server too, whatever it is (SGLang adds the graph batch
    # to its capture list: tests/fixtures/sglang/0.5.17/capture-pools/); 64 stays its own
    spec = parse_spec(_demo(max_running_requests={"choices": [16, 48, 100]}), "demo.yaml")
    (warning,) = one_server_warnings(spec)
    assert warning.startswith("note: search.cuda_graph_max_bs: 128, 256 and 512 are one server"), warning


def test_an_engines_own_rule_names_its_own_values() -> None:
    data = toy_data()
    data["search"]["engine"] = {"toy_tick_ms": {"choices": [1.2, 1.7, 3, 25]}}
    (warning,) = one_server_warnings(parse_spec(data, "toy.yaml"))
    assert warning.startswith("note: search.engine.toy_tick_ms: 1.2 and 1.7 are one server")
    assert "steps of 1" in warning
    # a stepped range is searched on its steps: 1.0, 1.5, 2.0, ... 3.0
    data["search"]["engine"] = {"toy_tick_ms": {"low": 1, "high": 3, "step": 0.5}}
    (warning,) = one_server_warnings(parse_spec(data, "toy.yaml"))
    assert warning.startswith("note: search.engine.toy_tick_ms: 1 and 1.5; 2 and 2.5 are one server each")
