"""A trial's files on the node: a folder of its own, and its log as it goes back to the driver."""

from __future__ import annotations

from pathlib import Path

LOG_LIMIT = 4 * 1024 * 1024  # the whole log goes back to the driver, up to this size


def fresh_folder(path: Path) -> Path:
    """`path`, or `path.1`, `path.2`, ... whichever does not exist yet, created empty.

    A trial's files are its own: a folder left by an earlier run (the same study name and trial number)
    is never appended to, or the log parser would read the old run's lines as this trial's.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    for n in range(10_000):
        candidate = path if n == 0 else path.with_name(f"{path.name}.{n}")
        try:
            candidate.mkdir()
        except FileExistsError:
            continue
        return candidate
    raise RuntimeError(f"no free trial folder next to {path}")


def read_capped(path: Path) -> str:
    """The whole log, or its head and its tail when it is over ``LOG_LIMIT``."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return ""
    if len(data) > LOG_LIMIT:
        data = data[: LOG_LIMIT // 4] + b"\n[... trimmed ...]\n" + data[-3 * LOG_LIMIT // 4 :]
    return data.decode(errors="replace")
