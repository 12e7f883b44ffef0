"""What the spec knows of each engine before any engine's code loads: its name, the flags it owns and,
for an engine registered with one, its search space (`spec.engine_space.EngineSpace`).

The spec validates `engine:` and refuses a fixed flag the engine owns; it stands on a lower floor than the
engines' own code (`engines/`, which reads the spec), so it reads only an engine's declaration, a leaf on
the lowest floor: SGLang's (`engines.sglang.declaration`) is read below, as the product's own engine;
`engines.register` declares those of any other engine.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum
from functools import partial

from orchestrator.config.served import served_as
from orchestrator.engines.sglang.declaration import FORCED as SGLANG_FORCED
from orchestrator.engines.sglang.declaration import OWNED_FLAGS as SGLANG_OWNED_FLAGS
from orchestrator.engines.sglang.declaration import READING as SGLANG_READING
from orchestrator.engines.sglang.declaration import SAME_SERVER as SGLANG_SAME_SERVER
from orchestrator.records import ServerConfig
from orchestrator.spec.engine_space import EngineSpace, FlagReading, Forced, SameServer


class EngineName(StrEnum):
    """The product's engines. An engine a test or a plug-in registers may carry a name outside it."""

    SGLANG = "sglang"


_OWNED: dict[str, frozenset[str]] = {EngineName.SGLANG.value: SGLANG_OWNED_FLAGS}
_READINGS: dict[str, FlagReading] = {EngineName.SGLANG.value: SGLANG_READING}
# SGLang's space is the spec's own search section (its fields are SGLang's), so it is checked by that
# section's model; it is declared here when SGLang's engine registers, as any engine's is.
_SPACES: dict[str, EngineSpace] = {}
# Its rules of which configurations are one server are known before its code loads, as its flags are.
_SAME_SERVER: dict[str, tuple[SameServer, ...]] = {EngineName.SGLANG.value: SGLANG_SAME_SERVER}
# So are the values it sets itself whatever is asked.
_FORCED: dict[str, tuple[Forced, ...]] = {EngineName.SGLANG.value: SGLANG_FORCED}


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
        _SAME_SERVER[str(name)] = space.same_server
        _FORCED[str(name)] = space.forced
    if flag_reading is not None:
        _READINGS[str(name)] = flag_reading


def space(name: str) -> EngineSpace | None:
    """The search space engine ``name`` declared; None when it declared none (yet)."""
    return _SPACES.get(str(name))


def same_server(name: str) -> tuple[SameServer, ...]:
    """Engine ``name``'s rules of which configurations it serves as one server; none for an engine that
    declared none."""
    return _SAME_SERVER.get(str(name), ())


def forced(name: str) -> tuple[Forced, ...]:
    """The values engine ``name`` launches at whatever its flags ask (`spec.engine_space.Forced`); none
    for an engine that declared none."""
    return _FORCED.get(str(name), ())


def server_of(name: str) -> Callable[[ServerConfig], ServerConfig]:
    """The server engine ``name`` makes of a configuration (`config.served.served_as` under its rules):
    the key under which the driver knows what it has measured."""
    return partial(served_as, rules=same_server(name))


def reading(name: str) -> FlagReading:
    """Which of engine ``name``'s fixed flags the driver reads typed; none for an engine that named none."""
    return _READINGS.get(str(name), FlagReading())


def names() -> tuple[str, ...]:
    return tuple(sorted(_OWNED))


def owned_flags(name: str) -> frozenset[str]:
    """The flags the sweep sets for engine ``name``; KeyError for an engine nobody declared."""
    return _OWNED[str(name)]
