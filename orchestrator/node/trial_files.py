"""A trial's files on the node: a folder of its own (its log goes back to the driver by `trial_log`)."""

from __future__ import annotations

from pathlib import Path


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
