"""A launch command as a shell reads it: what every saved command is written as, whatever the engine."""

from __future__ import annotations

import shlex
from collections.abc import Sequence


def shell_command(argv: Sequence[str]) -> str:
    """The command as a shell reads it, one flag and its value per line (as in SGLang's docs), so a
    reader sees `--tp-size 8` together and can copy it whole."""
    lines: list[list[str]] = [[]]
    for arg in argv:
        if arg.startswith("--"):
            lines.append([])
        lines[-1].append(shlex.quote(arg))
    return " \\\n  ".join(" ".join(line) for line in lines if line)


def shell_script(argv: Sequence[str]) -> str:
    """A runnable launch script: the one format for every saved command (best_command.sh, each trial's
    launch_command.sh); `exec` so the server gets the signals sent to the script."""
    return "#!/bin/sh\nexec " + shell_command(argv) + "\n"
