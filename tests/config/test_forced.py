"""The values an engine launches at whatever its flags ask (`Forced`): declared by the engine, applied
by the generic code as a configuration is built (`spec.search.make_config`)."""

from __future__ import annotations

from orchestrator.config.served import launched_as
from orchestrator.engines.sglang import declaration
from orchestrator.engines.sglang.space import SGLANG_SPACE
from orchestrator.spec import engine_catalog
from orchestrator.spec.engine_space import Forced
from orchestrator.spec.search import known_good_problems, make_config
from orchestrator.spec.sweep_spec import EXAMPLE_SPEC as DEMO
from orchestrator.spec.sweep_spec import load_spec

SGLANG = engine_catalog.forced("sglang")


def test_an_engine_with_no_such_rule_keeps_the_draft_tokens_asked() -> None:
    assert make_config(0.9, 16, 16, 3, 1, 7, forced=()).speculative_num_draft_tokens == 7
    # none asked: the chain, steps + 1, whatever the engine
    assert make_config(0.9, 16, 16, 3, 1, None, forced=()).speculative_num_draft_tokens == 4


def test_sglang_declares_steps_plus_one_at_topk_1() -> None:
    assert SGLANG == declaration.FORCED == SGLANG_SPACE.forced
    assert make_config(0.9, 16, 16, 3, 1, 7, forced=SGLANG).speculative_num_draft_tokens == 4
    # above top-k 1 the draft tokens are as asked
    assert make_config(0.9, 16, 16, 3, 2, 7, forced=SGLANG).speculative_num_draft_tokens == 7
    # the speculative values are SGLang's fields: its rules are the default
    assert make_config(0.9, 16, 16, 3, 1, 7) == make_config(0.9, 16, 16, 3, 1, 7, forced=SGLANG)


def test_a_rule_of_an_engines_own_declaration_on_its_own_value() -> None:
    rule = Forced("tick_ms", base="max_running_requests", plus=0.0, when="cuda_graph_max_bs", equals=8.0)
    assert engine_catalog.forced("an-engine-nobody-declared") == ()
    config = make_config(0.9, 8, 16, engine_values={"tick_ms": 1.5}, forced=(rule,))
    assert config.engine_value("tick_ms") == 16.0
    # where the condition does not hold, the value is as asked
    assert (
        make_config(0.9, 9, 16, engine_values={"tick_ms": 1.5}, forced=(rule,)).engine_value("tick_ms") == 1.5
    )


def test_a_rule_on_a_value_the_configuration_lacks_changes_nothing() -> None:
    plain = make_config(0.9, 16, 16)  # no speculation: no draft tokens to force
    assert launched_as(plain, SGLANG) == plain


def test_a_known_good_value_the_engine_would_set_itself_is_refused_by_its_rules() -> None:
    spec = load_spec(DEMO)
    asks = spec.known_good[0].model_copy(update={"speculative_num_draft_tokens": 7})  # top-k 1, 3 steps
    (problem,) = known_good_problems(asks, spec.search, 0, forced=SGLANG)
    assert "speculative_num_draft_tokens" in problem and "steps + 1 = 4, not 7" in problem
    # an engine that runs the draft tokens asked takes them as written
    assert known_good_problems(asks, spec.search, 0, forced=()) == []
