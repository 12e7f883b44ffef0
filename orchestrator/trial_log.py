"""A trial's server log and command as read back from its folder: by the node when the trial ends, and by
the driver when the trial never ended (interrupted, its driver killed), so that such a launch still shows
the log a user opens it for."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

LOG_LIMIT = 4 * 1024 * 1024  # the whole log goes back to the driver, up to this size
SERVER_LOG = "server.log"
COMMAND_TXT = "command.txt"


def read_capped(path: Path) -> str:
    """The whole log, or its head and its tail when it is over ``LOG_LIMIT``."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return ""
    if len(data) > LOG_LIMIT:
        data = data[: LOG_LIMIT // 4] + b"\n[... trimmed ...]\n" + data[-3 * LOG_LIMIT // 4 :]
    return data.decode(errors="replace")


@dataclass(frozen=True)
class LeftBehind:
    """What a trial's folder holds of a launch that never reported back: its log and its (masked) command."""

    log_path: Path | None = None
    log_text: str = ""
    command: tuple[str, ...] = ()


def left_in(folder: Path) -> LeftBehind:
    """What a trial's folder holds of a launch (nothing where the trial wrote nothing). The node writes
    into a fresh folder (`folder`, else `folder.1`, ...): the one written last is this launch's."""
    candidates = [p for p in (folder, *folder.parent.glob(f"{folder.name}.*")) if p.is_dir()]
    if not candidates:
        return LeftBehind()
    latest = max(candidates, key=lambda p: p.stat().st_mtime)
    log = latest / SERVER_LOG
    command = latest / COMMAND_TXT
    return LeftBehind(
        log if log.is_file() else None,
        read_capped(log),
        _argv(command.read_text()) if command.is_file() else (),
    )


def _argv(line: str) -> tuple[str, ...]:
    # The node writes the masked argv joined by spaces: split as a shell would, else at the spaces (a
    # value with a lone quote in it).
    try:
        return tuple(shlex.split(line))
    except ValueError:
        return tuple(line.split())
