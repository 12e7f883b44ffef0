"""The server an engine makes of a configuration: its declared rules (`SameServer`) applied as a key."""

from __future__ import annotations

from orchestrator.config.served import served_as
from orchestrator.engines.sglang.space import SGLANG_SPACE
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
