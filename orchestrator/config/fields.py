"""The searched values of a configuration, defined once: each one's name, type and whether it is speculative.

A `ServerConfig` field, its Optuna param, its MLflow param and its key in the spec's ``search`` and
``known_good`` sections all carry the same name, a `SearchedField` value; the list of numeric values the
report and the known-good check walk through is read from here. How an engine sets each one on its
command line is the engine's own (SGLang's: `engines.sglang.declaration`). ``config.codec`` turns a
configuration into each of those forms and back. Every field of `ServerConfig` is a searched value and
every searched value a field (tests/config/test_config_codec.py checks it, and that the spec's sections have
them all). A leaf module (it imports only ``adaptive``), so that the spec, the engines and the codec can
all read it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from orchestrator.config.adaptive import AdaptiveMode


class SearchedField(StrEnum):
    """One searched value: its name everywhere (ServerConfig, Optuna, MLflow, the spec)."""

    MEM_FRACTION_STATIC = "mem_fraction_static"
    CUDA_GRAPH_MAX_BS = "cuda_graph_max_bs"
    MAX_RUNNING_REQUESTS = "max_running_requests"
    SPECULATIVE_NUM_STEPS = "speculative_num_steps"
    SPECULATIVE_EAGLE_TOPK = "speculative_eagle_topk"
    SPECULATIVE_NUM_DRAFT_TOKENS = "speculative_num_draft_tokens"
    SPECULATIVE_ADAPTIVE = "speculative_adaptive"

    @property
    def definition(self) -> FieldDef:
        return _DEFINITIONS[self]

    @property
    def kind(self) -> type[float] | type[int] | type[AdaptiveMode]:
        return self.definition.kind

    @property
    def speculative(self) -> bool:
        """Set only with speculation on (the speculative values travel together)."""
        return self.definition.speculative


@dataclass(frozen=True)
class FieldDef:
    kind: type[float] | type[int] | type[AdaptiveMode]
    speculative: bool = False


_DEFINITIONS: dict[SearchedField, FieldDef] = {
    SearchedField.MEM_FRACTION_STATIC: FieldDef(float),
    SearchedField.CUDA_GRAPH_MAX_BS: FieldDef(int),
    SearchedField.MAX_RUNNING_REQUESTS: FieldDef(int),
    SearchedField.SPECULATIVE_NUM_STEPS: FieldDef(int, speculative=True),
    SearchedField.SPECULATIVE_EAGLE_TOPK: FieldDef(int, speculative=True),
    SearchedField.SPECULATIVE_NUM_DRAFT_TOKENS: FieldDef(int, speculative=True),
    SearchedField.SPECULATIVE_ADAPTIVE: FieldDef(AdaptiveMode, speculative=True),
}

# The numeric values, in the order the report and the known-good check list them.
NUMERIC_FIELDS: tuple[SearchedField, ...] = tuple(f for f in SearchedField if f.kind is not AdaptiveMode)
SPECULATIVE_FIELDS: tuple[SearchedField, ...] = tuple(f for f in SearchedField if f.speculative)
