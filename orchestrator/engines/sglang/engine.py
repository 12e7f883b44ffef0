"""SGLang as an `engines.engine.Engine`: each member delegates to SGLang's own modules beside it."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from importlib import metadata
from typing import TYPE_CHECKING

from orchestrator.config import adaptive
from orchestrator.engines.engine import TrialLaunch
from orchestrator.engines.sglang import command
from orchestrator.engines.sglang.declaration import OWNED_FLAGS
from orchestrator.engines.sglang.logparse import LogParser
from orchestrator.engines.sglang.space import SGLANG_SPACE
from orchestrator.engines.sglang.wire import SGLANG_API, SglangApi
from orchestrator.records import ServerConfig
from orchestrator.spec.engine_catalog import EngineName
from orchestrator.spec.engine_space import EngineSpace

if TYPE_CHECKING:
    import aiohttp


@dataclass(frozen=True)
class SglangEngine:
    name: str = EngineName.SGLANG.value
    launch_module: str = "sglang.launch_server"
    distribution: str = "sglang"
    owned_flags: frozenset[str] = OWNED_FLAGS
    api: SglangApi = SGLANG_API
    space: EngineSpace = SGLANG_SPACE

    def installed_version(self, python: str) -> str:
        try:
            return metadata.version(self.distribution)
        except metadata.PackageNotFoundError:
            # A spec may point server.python at another environment; ask that interpreter.
            return self._version_from_interpreter(python) or "unknown"

    def _version_from_interpreter(self, python: str) -> str:
        if not python:
            return ""
        code = f"import importlib.metadata as m; print(m.version({self.distribution!r}))"
        try:
            out = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=60, check=True)
        except (OSError, subprocess.SubprocessError):
            return ""
        return out.stdout.strip()

    def parse_version(self, text: str) -> tuple[int, ...]:
        return command.parse_version(text)

    def unsupported(self, config: ServerConfig, version: str) -> str:
        return adaptive.unsupported(config, version, command.parse_version(version))

    def flags(self, launch: TrialLaunch) -> list[str]:
        return command.render_flags(launch)

    def flag_name(self, param: str, version: str) -> str:
        return command.flag_name(param, version)

    def log_parser(self) -> LogParser:
        return LogParser()

    async def flush_cache(self, base_url: str, session: aiohttp.ClientSession) -> bool:
        # Imported here: loading the engine (the driver does, for its names and flags) loads no aiohttp.
        from orchestrator.engines.sglang.control import flush_cache

        return await flush_cache(base_url, session, endpoints=self.api.endpoints)


SGLANG = SglangEngine()
