"""A toy inference engine, registered from this folder alone: its own flags, launch module, log and API.

It shows what adding an engine takes (`engines.engine.Engine`, `engines.register`) and, in
`test_toy_engine.py`, that the product launches, watches and benchmarks it with no edit anywhere else.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from orchestrator import engines
from orchestrator.engines.engine import Endpoints
from orchestrator.engines.logrecords import LogEvent, LogReport
from orchestrator.records import Failure, FailureKind, FailureStage, MemoryAccount, ServerConfig
from orchestrator.spec import SweepSpec

FOLDER = Path(__file__).resolve().parent
READY_LINE = "toy-server: serving on"
ERROR_LINE = "toy-server: error:"
TOY_ENDPOINTS = Endpoints(
    generate="/toy/generate", health="/toy/health", flush_cache="/toy/flush", server_info=("/toy/info",)
)


@dataclass
class ToyLogParser:
    """Ready on the server's `serving on` line, failed on an `error:` line; no memory account."""

    ready: bool = False
    ready_at: float | None = None
    failure: Failure | None = None
    error_at: float | None = None
    lines: list[str] = field(default_factory=list)

    def feed(self, line: str, now: float | None = None) -> LogEvent:
        self.lines.append(line)
        if line.startswith(READY_LINE) and not self.ready:
            self.ready, self.ready_at = True, now
            return LogEvent.READY
        if line.startswith(ERROR_LINE) and self.failure is None:
            self.failure = Failure(
                FailureStage.LAUNCH, FailureKind.CRASH, line.removeprefix(ERROR_LINE).strip()
            )
            self.error_at = now
            return LogEvent.FAILED
        return LogEvent.NONE

    def report(self) -> LogReport:
        return LogReport(
            ready=self.ready,
            failure=self.failure,
            memory=MemoryAccount(),
            args=None,
            weight_loads=(),
            kv_allocations=(),
            graphs=(),
            decode_accept_lens=(),
            retractions=0,
            runtime_oom=False,
            error_line_at=self.error_at,
            port_in_use=False,
            last_stage=FailureStage.LAUNCH,
            ready_at=self.ready_at,
        )


@dataclass(frozen=True)
class ToyEngine:
    name: str = "toy"
    launch_module: str = "toy_server"  # tests/engines/toy/toy_server.py, on the server's PYTHONPATH
    owned_flags: frozenset[str] = frozenset(
        {"--toy-model", "--toy-gpus", "--toy-batch", "--toy-host", "--toy-port"}
    )
    endpoints: Endpoints = TOY_ENDPOINTS

    def installed_version(self, python: str) -> str:
        return "1.2"

    def parse_version(self, text: str) -> tuple[int, ...]:
        return tuple(int(p) for p in text.split(".") if p.isdigit())

    def unsupported(self, config: ServerConfig, version: str) -> str:
        return "the toy has no adaptive speculation" if config.speculative_adaptive else ""

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
        return [
            "--toy-model",
            spec.model.path,
            "--toy-gpus",
            str(tp_size),
            "--toy-batch",
            str(config.max_running_requests),
            *spec.server.flags,
            "--toy-host",
            spec.server.host,
            "--toy-port",
            str(port),
        ]

    def flag_name(self, param: str, version: str) -> str:
        return "--toy-" + param.replace("_", "-")

    def log_parser(self) -> ToyLogParser:
        return ToyLogParser()


TOY = ToyEngine()
engines.register(TOY)
