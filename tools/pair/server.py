"""One SGLang server started for the pair's tools, and stopped with everything it started.

The server runs in a process group of its own; `stop` signals that group by its id (never a process
by name), waits, and kills what is left, so no server or GPU memory outlives the tool.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

log = logging.getLogger(__name__)

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

    module: str = "sglang.launch_server"
    extra: tuple[str, ...] = ()


SGLANG = Launcher()


@dataclass
class Server:
    """A launched server: its process, port and log file."""

    port: int
    log_path: Path
    args: list[str]
    launcher: Launcher = SGLANG
    process: subprocess.Popen[bytes] | None = None
    _log: IO[bytes] | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self._log = self.log_path.open("wb")
        cmd = [sys.executable, "-m", self.launcher.module, *self.args, *self.launcher.extra,
               "--host", "127.0.0.1", "--port", str(self.port)]  # fmt: skip
        log.info("starting: %s", " ".join(cmd))
        self.process = subprocess.Popen(
            cmd, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True
        )

    def wait_ready(self, timeout_s: float) -> float:
        """Seconds until /health answered 200; ServerError when the process died or time ran out."""
        assert self.process is not None
        started = time.monotonic()
        while time.monotonic() - started < timeout_s:
            if self.process.poll() is not None:
                raise ServerError(
                    f"server on port {self.port} exited with {self.process.returncode}: see {self.log_path}"
                )
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=5) as reply:
                    if reply.status == 200:
                        return time.monotonic() - started
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(1.0)
        raise ServerError(
            f"server on port {self.port} not healthy after {timeout_s:.0f} s: see {self.log_path}"
        )

    def stop(self, grace_s: float = 20.0) -> None:
        """SIGINT to the server's process group, SIGKILL to what remains after ``grace_s``."""
        if self.process is None:
            return
        pgid = self.process.pid  # its own session: the group id is its pid
        for sig, wait in ((signal.SIGINT, grace_s), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(pgid, sig)
            except ProcessLookupError:
                break
            try:
                self.process.wait(timeout=wait)
            except subprocess.TimeoutExpired:
                continue
            # The launcher is gone; its children may not be: signal the group again until it is empty.
            try:
                os.killpg(pgid, 0)
            except ProcessLookupError:
                break
        if self._log is not None:
            self._log.close()
        log.info("server on port %d stopped (rc %s)", self.port, self.process.returncode)
