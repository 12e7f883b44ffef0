"""What an inference engine gives the rest of the product: the `Engine` protocol.

A trial asks the spec's engine (`engines.engine_for(spec.engine)`) for everything that is the engine's
own: the module a node launches and the flags it renders, which flags it owns, which configurations its
version can run, the reader that follows its log into a `LogReport`, its HTTP API as the benchmark
client speaks it (`engines.api.ServerApi`), its cache flush, and its search space (`Engine.space`: the
fields it can be searched in, which the spec's search block is checked against, and whether the memory
prior, fitted on SGLang's accounting, applies to it). A field of that space that is no searched value of
SGLang's is the engine's own (the spec's `search.engine`, `ServerConfig.engine_values`), which the engine
renders with its own flags, and the space's rules of which configurations the engine serves as one server
(`spec.engine_space.SameServer`) are what the driver knows its measurements by; the values it sets itself
whatever is asked (`spec.engine_space.Forced`: SGLang's draft tokens under top-k 1) are applied as a
configuration is built (`spec.search.make_config`). The configuration record's
other fields and the rules between the speculative values (`spec.search`, `driver/search/space.py`) stay
SGLang's for now.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, TypeVar

from orchestrator.config import adaptive
from orchestrator.engines.api import ServerApi
from orchestrator.engines.logrecords import LogEvent, LogReport, ResolvedArgs
from orchestrator.records import ServerConfig
from orchestrator.spec.engine_catalog import EngineName
from orchestrator.spec.engine_space import EngineSpace
from orchestrator.spec.sweep_spec import SweepSpec

if TYPE_CHECKING:
    import aiohttp

__all__ = ["Engine", "EngineName", "LaunchSettings", "LogReader", "TrialLaunch", "read_all"]


@dataclass(frozen=True)
class LaunchSettings:
    """What a launch takes from the spec besides its configuration: with the configuration, what every
    command of a trial is rendered from (`engines.launch.command_argv`: the launch, best_command.sh, and
    a command read back from an MLflow run, which records these as params)."""

    engine: str
    model_path: str
    draft_path: str = ""
    speculative_algorithm: str = ""
    fixed_flags: tuple[str, ...] = ()  # the spec's own flags, as given
    enable_metrics: bool = False
    host: str = "127.0.0.1"
    python: str = ""  # the interpreter on the node; empty = the worker's own
    secret_flags: tuple[str, ...] = ()  # the spec's, beyond the engine's credential flags

    @classmethod
    def from_spec(cls, spec: SweepSpec) -> LaunchSettings:
        return cls(
            engine=spec.engine,
            model_path=spec.model.path,
            draft_path=spec.model.draft_path,
            speculative_algorithm=spec.model.speculative_algorithm,
            fixed_flags=tuple(spec.server.flags),
            enable_metrics=spec.server.enable_metrics,
            host=spec.server.host,
            python=spec.server.python,
            secret_flags=tuple(spec.server.secret_flags),
        )


@dataclass(frozen=True)
class TrialLaunch:
    """One launch of one configuration, all its command is rendered from: the configuration, what the
    spec launches it with, the engine's version on the node (flags are spelled per version), the port and
    the tensor-parallel size the sweep gives it, and where adaptive speculation's tiers file lies."""

    settings: LaunchSettings
    config: ServerConfig
    version: str
    port: int
    tp_size: int
    adaptive_config_path: str = adaptive.CONFIG_FILE


class LogReader(Protocol):
    """Follows one server log, a line at a time; `report` says what the log has shown so far."""

    def feed(self, line: str, now: float | None = None) -> LogEvent:
        """Take one line (a trailing newline is fine); ``now`` is the monotonic time it was read."""
        ...

    def finish(self, now: float | None = None) -> LogEvent:
        """The log ended (the process exited): settle what was still open."""
        ...

    def report(self) -> LogReport[ResolvedArgs]: ...


Reader = TypeVar("Reader", bound=LogReader)


def read_all(reader: Reader, text: str) -> Reader:
    """``reader`` fed a whole log at once and finished (no `now`: ``error_line_at`` stays None)."""
    for line in text.splitlines():
        reader.feed(line)
    reader.finish()
    return reader


class Engine(Protocol):
    @property
    def name(self) -> str: ...  # an `EngineName`, or a registered engine's own name

    @property
    def launch_module(self) -> str: ...  # what `python -m` runs on a real node

    @property
    def owned_flags(self) -> frozenset[str]: ...

    @property
    def api(self) -> ServerApi: ...

    @property
    def space(self) -> EngineSpace:
        """What the engine is searched in: its fields and flags, whether the memory prior applies, and
        which configurations it serves as one server."""
        ...

    def installed_version(self, python: str) -> str:
        """The engine's version on this node ('' or 'unknown' when unreadable); ``python`` is the spec's
        interpreter ('' = the worker's own)."""
        ...

    def parse_version(self, text: str) -> tuple[int, ...]: ...

    def unsupported(self, config: ServerConfig, version: str) -> str:
        """Why ``config`` cannot launch on this version of the engine; '' when it can."""
        ...

    def flags(self, launch: TrialLaunch) -> list[str]:
        """The engine's own flags for one trial, in a stable order (`engines.launch.command_argv` puts
        them after the module)."""
        ...

    def flag_name(self, param: str, version: str) -> str:
        """The flag that sets a configuration's param (its MLflow param name), as ``version`` spells it."""
        ...

    def log_parser(self) -> LogReader: ...

    async def flush_cache(self, base_url: str, session: aiohttp.ClientSession) -> bool:
        """Empty the server's prefix cache between benchmark stages; False when the server would not."""
        ...
