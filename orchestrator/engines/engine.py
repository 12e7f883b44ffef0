"""What an inference engine gives the rest of the product: the `Engine` protocol.

A trial asks the spec's engine (`engines.engine_for(spec.engine)`) for everything that is the engine's
own: the module a node launches and the flags it renders, which flags it owns, which configurations its
version can run, the parser that follows its log into a `LogReport`, and the paths of its HTTP API. The
memory prior (`driver/memory/`) and the search-space rules (`spec_search`, `driver/space.py`) stay
SGLang's for now: they are fitted on SGLang's accounting and not routed through the engine.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from orchestrator.engine_catalog import EngineName
from orchestrator.engines.sglang.logrecords import LogEvent, LogReport
from orchestrator.records import ServerConfig
from orchestrator.spec import SweepSpec

__all__ = ["Endpoints", "Engine", "EngineName", "LogReader"]


@dataclass(frozen=True)
class Endpoints:
    """The paths of the engine's HTTP API the benchmark client calls."""

    generate: str  # POST, streamed
    health: str  # GET, 200 once the server serves
    flush_cache: str  # POST, between stages
    server_info: tuple[str, ...]  # GET, tried in order: the first that answers 200 wins

    def url(self, base_url: str, path: str) -> str:
        return base_url.rstrip("/") + path


class LogReader(Protocol):
    """Follows one server log, a line at a time; `report` says what the log has shown so far."""

    def feed(self, line: str, now: float | None = None) -> LogEvent: ...
    def report(self) -> LogReport: ...


class Engine(Protocol):
    @property
    def name(self) -> str: ...  # an `EngineName`, or a registered engine's own name

    @property
    def launch_module(self) -> str: ...  # what `python -m` runs on a real node

    @property
    def owned_flags(self) -> frozenset[str]: ...

    @property
    def endpoints(self) -> Endpoints: ...

    def installed_version(self, python: str) -> str:
        """The engine's version on this node ('' or 'unknown' when unreadable); ``python`` is the spec's
        interpreter ('' = the worker's own)."""
        ...

    def parse_version(self, text: str) -> tuple[int, ...]: ...

    def unsupported(self, config: ServerConfig, version: str) -> str:
        """Why ``config`` cannot launch on this version of the engine; '' when it can."""
        ...

    def flags(
        self,
        spec: SweepSpec,
        config: ServerConfig,
        *,
        version: str,
        port: int,
        tp_size: int,
        adaptive_config_path: str,
    ) -> list[str]:
        """The engine's own flags for one trial, in a stable order."""
        ...

    def flag_name(self, param: str, version: str) -> str:
        """The flag that sets a configuration's param (its MLflow param name), as ``version`` spells it."""
        ...

    def log_parser(self) -> LogReader: ...
