"""A trial's server log and command as read back from its folder: by the node when the trial ends, and by
the driver when the trial never ended (interrupted, its driver killed), so that such a launch still shows
the log a user opens it for."""

from __future__ import annotations

import shlex
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


def left_in(folder: Path) -> tuple[Path | None, str, tuple[str, ...]]:
    """What a trial's folder holds of a launch: its log's path and text, and its (masked) command. The
    node writes into a fresh folder (`folder`, else `folder.1`, ...): the one written last is this
    launch's. (None, "", ()) where the trial wrote nothing."""
    candidates = [p for p in (folder, *folder.parent.glob(f"{folder.name}.*")) if p.is_dir()]
    if not candidates:
        return None, "", ()
    latest = max(candidates, key=lambda p: p.stat().st_mtime)
    log = latest / SERVER_LOG
    command = latest / COMMAND_TXT
    argv = tuple(shlex.split(command.read_text())) if command.is_file() else ()
    return (log if log.is_file() else None), read_capped(log), argv
