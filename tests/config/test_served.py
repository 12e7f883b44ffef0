"""The server an engine makes of a configuration: its declared rules (`SameServer`) applied as a key."""

from __future__ import annotations

import re
from pathlib import Path

from orchestrator.config.served import served_as
from orchestrator.engines.sglang.space import SGLANG_SPACE
from orchestrator.footprint.sglang_defaults import capture_sizes
from orchestrator.records import ServerConfig
from orchestrator.spec import engine_catalog
from orchestrator.spec.engine_space import RuleKind, SameServer
from orchestrator.spec.search import make_config

SGLANG = engine_catalog.same_server("sglang")


def test_sglangs_graph_batch_above_its_request_pool_is_the_pools_server() -> None:
    low, high = make_config(0.9, 16, 16, 3, 1, 4), make_config(0.9, 256, 16, 3, 1, 4)
    assert served_as(high, SGLANG) == served_as(low, SGLANG) == low
    # below the pool the graph batch is a server of its own, with speculation or without
    assert served_as(make_config(0.9, 8, 16, 3, 1, 4), SGLANG).cuda_graph_max_bs == 8
    assert served_as(make_config(0.9, 64, 32), SGLANG) == make_config(0.9, 32, 32)
    # what a launch is rendered from is never the key: the configuration itself is unchanged
    assert high.cuda_graph_max_bs == 256


def test_the_rule_sglang_declares_before_its_code_loads_is_its_spaces() -> None:
    assert SGLANG_SPACE.same_server == SGLANG
    assert engine_catalog.same_server("an-engine-nobody-declared") == ()


def test_a_stepped_rule_on_an_engines_own_value() -> None:
    rules = (SameServer("tick_ms", RuleKind.STEPPED, step=0.5),)
    a = make_config(0.9, 16, 16, engine_values={"tick_ms": 1.2, "other": 3.3})
    b = make_config(0.9, 16, 16, engine_values={"tick_ms": 1.4, "other": 3.3})
    c = make_config(0.9, 16, 16, engine_values={"tick_ms": 1.5, "other": 3.3})
    assert served_as(a, rules) == served_as(b, rules) != served_as(c, rules)
    assert served_as(a, rules).engine_value("tick_ms") == 1.0
    assert served_as(a, rules).engine_value("other") == 3.3
    # applied twice, the key is the same key
    assert served_as(served_as(c, rules), rules) == served_as(c, rules)


def test_a_rule_on_a_value_the_configuration_lacks_changes_nothing() -> None:
    rules = (
        SameServer("tick_ms", RuleKind.STEPPED, step=1.0),
        SameServer("cuda_graph_max_bs", RuleKind.CAPPED, at="pool_size"),
    )
    config = make_config(0.9, 256, 16, 3, 1, 4)
    assert served_as(config, rules) == config


GRID = Path(__file__).resolve().parents[1] / "fixtures" / "sglang" / "0.5.17" / "llama8b-grid" / "trials"
_CAPTURE = re.compile(r"Capture (target verify|draft decode) CUDA graph begin\..*? bs=\[([\d, ]*)\]")
_FLAGS = re.compile(r"--(mem-fraction-static|cuda-graph-max-bs-decode|max-running-requests) ([\d.]+)")


def _launch(trial: str) -> tuple[ServerConfig, list[tuple[str, str]]]:
    """A launch of the H200 grid on real SGLang 0.5.17: its memory flags (its tree, s2k1d3, is every
    launch's) and the graphs its log says it captured."""
    flags = dict(_FLAGS.findall((GRID / trial / "command.txt").read_text()))
    config = make_config(
        float(flags["mem-fraction-static"]),
        int(flags["cuda-graph-max-bs-decode"]),
        int(flags["max-running-requests"]),
        2,
        1,
        3,
    )
    return config, _CAPTURE.findall((GRID / trial / "server.log").read_text())


def test_sglangs_rule_is_what_sglang_captured() -> None:
    """Real SGLang 0.5.17 on one H200: graph bs 256 under max running 16 captured the graphs graph bs 16
    did (trials 6 and 5), and the rule makes them one server; under max running 256, graph bs 16 and 64
    captured different graphs (trials 7 and 8), and the rule keeps them apart."""
    (low, low_graphs), (high, high_graphs) = _launch("0005"), _launch("0006")
    assert low_graphs and high_graphs == low_graphs
    assert served_as(high, SGLANG) == served_as(low, SGLANG)
    (g16, g16_graphs), (g64, g64_graphs) = _launch("0007"), _launch("0008")
    assert g16_graphs != g64_graphs
    assert served_as(g16, SGLANG) != served_as(g64, SGLANG)


def test_sglangs_rule_never_makes_one_server_of_two_that_capture_different_graphs() -> None:
    """The rule against SGLang's capture lists as the memory prior and the simulated node count them
    (`footprint.sglang_defaults.capture_sizes`, held to real logs below): two configurations it makes one
    server capture the same sizes, for every max running 1-599, with speculation and without."""
    graphs = [1, 8, 12, 16, 20, 32, 48, 64, 96, 100, 104, 128, 256, 300, 512, 520, 1024]
    for speculative in (True, False):
        for running in range(1, 600):
            captured: dict[ServerConfig, list[int]] = {}
            for g in graphs:
                config = make_config(0.9, g, running, *((2, 1, 3) if speculative else ()))
                sizes = capture_sizes(g, speculative, running)
                key = served_as(config, SGLANG)
                assert captured.setdefault(key, sizes) == sizes, (speculative, running, g)
    # and it holds where max running is not one of SGLang's own sizes too (SGLang adds the graph batch)
    assert served_as(make_config(0.9, 256, 100), SGLANG) == served_as(make_config(0.9, 100, 100), SGLANG)
    assert served_as(make_config(0.9, 256, 96), SGLANG) == served_as(make_config(0.9, 96, 96), SGLANG)


POOLS = Path(__file__).resolve().parents[1] / "fixtures" / "sglang" / "0.5.17" / "capture-pools"


def test_every_graph_batch_at_or_above_max_running_is_one_server_on_real_sglang() -> None:
    """Real SGLang 0.5.17 on one H100 (`tools/capture-pools.sh`): under max running 100, not one of its
    capture sizes, graph bs 100 captured 96 and 100 (it appends the graph batch to its list), the same as
    graph bs 256. The capture lists the prior and the simulated node count ended at 96 there, and the rule,
    fitted to them, kept the two apart: one server launched twice."""
    for running, graphs in ((96, (96, 256)), (100, (100, 256))):
        keys = set()
        for g in graphs:
            log = (POOLS / f"mrr{running}-gbs{g}.log").read_text()
            verify = next(sizes for runner, sizes in _CAPTURE.findall(log) if runner == "target verify")
            captured = [int(s) for s in verify.split(", ")]
            assert capture_sizes(g, True, running) == captured, (running, g)
            keys.add(served_as(make_config(0.8, g, running, 2, 1, 3), SGLANG))
        assert len(keys) == 1, running
