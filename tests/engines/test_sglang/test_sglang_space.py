"""SGLang's search space: every searched value, under the flag the newest SGLang spells it, and the
memory prior's defaults."""

from __future__ import annotations

from orchestrator.config.fields import SearchedField
from orchestrator.engines import engine_for
from orchestrator.engines.sglang.declaration import FIELD_FLAGS
from orchestrator.engines.sglang.space import SGLANG_SPACE
from orchestrator.spec import engine_catalog as catalog
from orchestrator.spec.engine_space import FieldKind


def test_every_searched_value_is_a_field_of_sglangs_space_under_its_flag() -> None:
    assert SGLANG_SPACE.names == tuple(f.value for f in SearchedField)
    newest = (0, 5, 23)
    for f in SearchedField:
        field = SGLANG_SPACE.field(f.value)
        assert field is not None and field.flag == FIELD_FLAGS[f].at(newest), f
    adaptive = SGLANG_SPACE.field(SearchedField.SPECULATIVE_ADAPTIVE.value)
    assert adaptive is not None and adaptive.kind is FieldKind.CHOICE and "tiers" in adaptive.choices
    assert SGLANG_SPACE.memory_defaults and SGLANG_SPACE.unknown(["lookahead", "max_running_requests"]) == [
        "lookahead"
    ]


def test_the_engine_declares_its_space_to_the_spec() -> None:
    assert engine_for("sglang").space is SGLANG_SPACE
    assert catalog.space("sglang") is SGLANG_SPACE
