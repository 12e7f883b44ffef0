"""What the spec knows of each engine before any engine's code loads: its name, the flags it owns and,
for an engine registered with one, its search space (`spec.engine_space.EngineSpace`).

The spec validates `engine:` and refuses a fixed flag the engine owns; it stands on a lower floor than the
engines' own code (`engines/`, which reads the spec), so these facts live here, outside that folder, and
no import runs from the spec into it. SGLang's are declared below; `engines.register` declares those of
any other engine.
"""

from __future__ import annotations

from enum import StrEnum

from orchestrator.config.fields import SEARCHED_FLAGS
from orchestrator.spec.engine_space import EngineSpace, FlagReading

# The SGLang flags the sweep owns: a fixed flag may not set them, or the trial would not be what the
# study thinks it measured.
SGLANG_OWNED_FLAGS: frozenset[str] = SEARCHED_FLAGS | {
    "--model-path",
    "--model",
    "--tp-size",
    "--tensor-parallel-size",
    "--host",
    "--port",
    "--speculative-algorithm",
    "--speculative-draft-model-path",
    "--speculative-draft-model",
}


# Where SGLang's fixed flags carry what the driver reads typed: the prefill chunk and graphs, the KV dtype
# (the memory prior) and the API key (the benchmark client).
SGLANG_READING = FlagReading(
    chunked_prefill_size="--chunked-prefill-size",
    kv_cache_dtype="--kv-cache-dtype",
    api_key="--api-key",
    prefill_graphs_off=(("--cuda-graph-backend-prefill", "disabled"), ("--disable-cuda-graph", None)),
)


class EngineName(StrEnum):
    """The product's engines. An engine a test or a plug-in registers may carry a name outside it."""

    SGLANG = "sglang"


_OWNED: dict[str, frozenset[str]] = {EngineName.SGLANG.value: SGLANG_OWNED_FLAGS}
_READINGS: dict[str, FlagReading] = {EngineName.SGLANG.value: SGLANG_READING}
# SGLang's space is the spec's own search section (its fields are SGLang's), so it is checked by that
# section's model; it is declared here when SGLang's engine registers, as any engine's is.
_SPACES: dict[str, EngineSpace] = {}


def declare(
    name: str,
    owned_flags: frozenset[str],
    space: EngineSpace | None = None,
    flag_reading: FlagReading | None = None,
) -> None:
    """Make ``name`` a valid `engine:` whose fixed flags may not set ``owned_flags``, whose search block
    is checked against ``space``, and whose fixed flags carry the typed facts ``flag_reading`` names."""
    _OWNED[str(name)] = frozenset(owned_flags)
    if space is not None:
        _SPACES[str(name)] = space
    if flag_reading is not None:
        _READINGS[str(name)] = flag_reading


def space(name: str) -> EngineSpace | None:
    """The search space engine ``name`` declared; None when it declared none (yet)."""
    return _SPACES.get(str(name))


def reading(name: str) -> FlagReading:
    """Which of engine ``name``'s fixed flags the driver reads typed; none for an engine that named none."""
    return _READINGS.get(str(name), FlagReading())


def names() -> tuple[str, ...]:
    return tuple(sorted(_OWNED))


def owned_flags(name: str) -> frozenset[str]:
    """The flags the sweep sets for engine ``name``; KeyError for an engine nobody declared."""
    return _OWNED[str(name)]
