"""The searched values of a configuration, defined once: each one's name, type and SGLang flag.

A `ServerConfig` field, its Optuna param, its MLflow param and its key in the spec's ``search`` and
``known_good`` sections all carry the same name, a `SearchedField` value; the flag that sets it on
SGLang's command line, the flags a spec may therefore not set itself, and the list of numeric values
the report and the known-good check walk through are read from here. ``config.codec`` turns a
configuration into each of those forms and back. Every field of `ServerConfig` is a searched value and
every searched value a field (tests/config/test_config_codec.py checks it, and that the spec's sections have
them all). A leaf module (it imports only ``adaptive``), so that the spec, the server's command line
and the codec can all read it.
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
        """Set only with speculation on (SGLang takes the speculative values together)."""
        return self.definition.speculative

    def flag(self, version: tuple[int, ...]) -> str:
        """The flag that sets it, as this SGLang version spells it."""
        d = self.definition
        if d.renamed is not None and version >= d.renamed[0]:
            return d.renamed[1]
        return d.flag

    @property
    def flags(self) -> tuple[str, ...]:
        """Every spelling of its flags on any SGLang version (and the adaptive config file's)."""
        d = self.definition
        return (d.flag, *((d.renamed[1],) if d.renamed else ()), *d.extra_flags)


@dataclass(frozen=True)
class FieldDef:
    kind: type[float] | type[int] | type[AdaptiveMode]
    flag: str  # the oldest spelling SGLang takes
    speculative: bool = False
    renamed: tuple[tuple[int, ...], str] | None = None  # (first version, new spelling)
    extra_flags: tuple[str, ...] = ()  # flags that come with it (the adaptive tiers' config file)


_DEFINITIONS: dict[SearchedField, FieldDef] = {
    SearchedField.MEM_FRACTION_STATIC: FieldDef(float, "--mem-fraction-static"),
    # 0.5.14 split the option per phase and kept the old name as a deprecated alias; 0.5.23 dropped it
    # (an ambiguous prefix now), so the new name is used wherever it exists.
    SearchedField.CUDA_GRAPH_MAX_BS: FieldDef(
        int, "--cuda-graph-max-bs", renamed=((0, 5, 14), "--cuda-graph-max-bs-decode")
    ),
    SearchedField.MAX_RUNNING_REQUESTS: FieldDef(int, "--max-running-requests"),
    SearchedField.SPECULATIVE_NUM_STEPS: FieldDef(int, "--speculative-num-steps", speculative=True),
    SearchedField.SPECULATIVE_EAGLE_TOPK: FieldDef(int, "--speculative-eagle-topk", speculative=True),
    SearchedField.SPECULATIVE_NUM_DRAFT_TOKENS: FieldDef(
        int, "--speculative-num-draft-tokens", speculative=True
    ),
    SearchedField.SPECULATIVE_ADAPTIVE: FieldDef(
        AdaptiveMode,
        "--speculative-adaptive",
        speculative=True,
        extra_flags=("--speculative-adaptive-config",),
    ),
}

# The numeric values, in the order the report and the known-good check list them.
NUMERIC_FIELDS: tuple[SearchedField, ...] = tuple(f for f in SearchedField if f.kind is not AdaptiveMode)
SPECULATIVE_FIELDS: tuple[SearchedField, ...] = tuple(f for f in SearchedField if f.speculative)
SEARCHED_FLAGS: frozenset[str] = frozenset(flag for f in SearchedField for flag in f.flags)
