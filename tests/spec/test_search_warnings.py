"""The warning for searched values an engine serves as one server: valid, but they measure less than they
look (each server is launched once; the other names are answered from its record)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from orchestrator.spec.search_warnings import draft_cap_warnings, one_server_warnings
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


def test_a_draft_token_cap_below_the_searched_trees_is_told_before_anything_launches() -> None:
    """A cap of 3 draft tokens holds no tree of top-k > 1 past 2 steps (a tree of s steps verifies s + 1
    tokens at least): the search launched s3k4d4 and s5k4d6 under it, and said nothing."""
    spec = parse_spec(_demo(speculative_num_draft_tokens={"low": 2, "high": 3}), "demo.yaml")
    (note,) = draft_cap_warnings(spec)
    assert note.startswith("note: search.speculative_num_draft_tokens: at most 3, but")
    assert "steps 3, 4 and 5" in note  # steps 1-5 searched, top-k 1, 2 and 4
    assert "s3k2d4" in note and "s5k1d6" in note  # the smallest tree launched at each, chains too
    assert "search.speculative_num_steps to at most 2" in note and "at least 6" in note


def test_a_draft_token_cap_every_searched_tree_fits_has_no_note() -> None:
    assert draft_cap_warnings(parse_spec(_demo(), "demo.yaml")) == []  # 2-12 against steps 1-5
    # the grid's "each tree at its widest up to 16": a choice above a tree is clipped to it, inside the cap
    spec = parse_spec(_demo(speculative_num_draft_tokens={"choices": [16]}), "demo.yaml")
    assert draft_cap_warnings(spec) == []
