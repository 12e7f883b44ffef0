"""The inference engines a trial launches, and the registry that finds the spec's.

`engines.engine.Engine` is what an engine gives the rest of the product; `register` adds one and
`engine_for` finds the spec's. Beside it stands what every engine shares: the launch plan (`launch`), the
server process and its log follower (`process`), the log's records (`logrecords`), the HTTP API's shape
(`api`) and the saved command (`shell`). `engines/sglang/` holds SGLang's own (its flags, its log
reader, its `/generate`), registered on first use; nothing outside it but this registry and the
simulated node (`sim/`) imports it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator.spec import engine_catalog as catalog

if TYPE_CHECKING:
    from orchestrator.engines.engine import Engine

_REGISTRY: dict[str, Engine] = {}


def register(engine: Engine) -> None:
    """Make ``engine`` the one named ``engine.name``: the spec accepts `engine: <name>` from now on, and
    checks its search block against the engine's space."""
    _REGISTRY[str(engine.name)] = engine
    catalog.declare(engine.name, engine.owned_flags, engine.space)


def engine_for(name: str) -> Engine:
    """The registered engine called ``name``; KeyError naming the known ones otherwise."""
    _register_builtins()
    try:
        return _REGISTRY[str(name)]
    except KeyError:
        raise KeyError(f"no engine {name!r} registered; known: {', '.join(sorted(_REGISTRY))}") from None


def _register_builtins() -> None:
    # Imported on first use, not at the top: importing the registry loads no engine's code (SGLang's
    # reads the spec, the tracker's read side only needs names).
    if catalog.EngineName.SGLANG.value not in _REGISTRY:
        from orchestrator.engines.sglang.engine import SGLANG

        register(SGLANG)
