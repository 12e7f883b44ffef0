"""One SGLang server started for the pair's tools, and stopped with everything it started.

The process is the product's own `ServerProcess` (its own group, the parent-death signal, SIGINT then
SIGKILL of exactly the tree it started, by id), so no server or GPU memory outlives the tool, as no trial's
does. What it runs is the engine's launch module (`engines.engine_for`), or the simulated node in tests.
"""

from __future__ import annotations

import logging
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.engines import engine_for
from orchestrator.engines.launch import LaunchPlan
from orchestrator.engines.process import ServerProcess
from orchestrator.spec.engine_catalog import EngineName

log = logging.getLogger(__name__)

ENGINE = engine_for(EngineName.SGLANG.value)

# The flags every server of the pair runs with on the offline node: FA3 is not in the offline bundle,
# and prefill CUDA graphs cost a minute of Triton compilation per fresh machine for nothing measured here.
BASE_FLAGS = (
    "--attention-backend", "triton",
    "--sampling-backend", "pytorch",
    "--grammar-backend", "none",
    "--cuda-graph-backend-prefill", "disabled",
)  # fmt: skip


class ServerError(RuntimeError):
    """The server exited or never answered /health; the message names its log."""


@dataclass(frozen=True)
class Launcher:
    """What starts a server: the module run with ``python -m``, and flags it always gets.

    SGLang's launcher on a GPU node; the product's simulated node (same flags, log and HTTP API) in tests.
    """

    module: str = ENGINE.launch_module
    extra: tuple[str, ...] = ()


SGLANG = Launcher()


@dataclass
class Server:
    """A launched server: its process, port and log file."""

    port: int
    log_path: Path
    args: list[str]
    launcher: Launcher = SGLANG
    process: ServerProcess | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        argv = (sys.executable, "-m", self.launcher.module, *self.args, *self.launcher.extra,
                "--host", "127.0.0.1", "--port", str(self.port))  # fmt: skip
        self.log_path.unlink(missing_ok=True)  # a rerun's log replaces the last one's
        self.process = ServerProcess(LaunchPlan(argv=argv, host="127.0.0.1", port=self.port), self.log_path)
        self.process.start()

    def wait_ready(self, timeout_s: float) -> float:
        """Seconds until /health answered 200; ServerError when the process died or time ran out."""
        assert self.process is not None, "start() first"
        health = ENGINE.api.endpoints.url(self.url, ENGINE.api.endpoints.health)
        started = time.monotonic()
        while time.monotonic() - started < timeout_s:
            rc = self.process.poll()
            if rc is not None:
                raise ServerError(f"server on port {self.port} exited with {rc}: see {self.log_path}")
            try:
                with urllib.request.urlopen(health, timeout=5) as reply:
                    if reply.status == 200:
                        return time.monotonic() - started
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(1.0)
        raise ServerError(
            f"server on port {self.port} not healthy after {timeout_s:.0f} s: see {self.log_path}"
        )

    def stop(self, grace_s: float = 20.0) -> None:
        if self.process is None:
            return
        report = self.process.stop(grace_s)
        log.info("server on port %d stopped (rc %s, %s)", self.port, report.returncode, report.signal_used)
