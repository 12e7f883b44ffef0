"""SGLang's search space: the searched values with the flags SGLang sets them by
(`engines.sglang.declaration`), their bounds, and the memory prior's defaults, which are SGLang's own
(`footprint/sglang_defaults.py`)."""

from __future__ import annotations

from orchestrator.config.adaptive import AdaptiveMode
from orchestrator.config.fields import SearchedField
from orchestrator.engines.sglang.declaration import FIELD_FLAGS, FORCED, SAME_SERVER
from orchestrator.spec.engine_space import EngineSpace, FieldKind, SpaceField

_KINDS = {float: FieldKind.FLOAT, int: FieldKind.INT}


def _field(searched: SearchedField) -> SpaceField:
    flag = FIELD_FLAGS[searched].newest
    if searched.kind is AdaptiveMode:
        return SpaceField(
            searched.value, FieldKind.CHOICE, flag, choices=tuple(m.value for m in AdaptiveMode)
        )
    if searched is SearchedField.MEM_FRACTION_STATIC:
        return SpaceField(searched.value, FieldKind.FLOAT, flag, low=0.0, high=1.0)
    # Speculative steps and top-k from 1, draft tokens from 2 (a tree of one token drafts nothing).
    low = 2.0 if searched is SearchedField.SPECULATIVE_NUM_DRAFT_TOKENS else 1.0
    return SpaceField(searched.value, _KINDS[searched.kind], flag, low=low)


SGLANG_SPACE = EngineSpace(
    fields=tuple(_field(f) for f in SearchedField),
    memory_defaults=True,
    same_server=SAME_SERVER,
    forced=FORCED,
)
