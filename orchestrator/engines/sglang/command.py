"""SGLang's command line, rendered for the SGLang version installed on the node.

The simulated node takes exactly the same flags, so both node kinds go through `sglang_flags`: a bug in
the flags shows up on the laptop too. `engines.launch.launch_plan` puts them after the module to run.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from orchestrator import adaptive, config_codec
from orchestrator.config_fields import SearchedField
from orchestrator.records import ServerConfig
from orchestrator.secrets import mask_argv
from orchestrator.spec import SweepSpec

# The simulated server's own flags start so; SGLang has none, so no SGLang setting is named so.
SIM_FLAG_PREFIX = "--sim-"


def parse_version(text: str) -> tuple[int, ...]:
    """'0.5.5.post3' -> (0, 5, 5); anything unreadable sorts as the newest release we know."""
    parts = re.findall(r"\d+", text.split("post")[0].split("rc")[0].split("dev")[0])
    return tuple(int(p) for p in parts[:3]) if parts else (0, 5, 23)


@dataclass(frozen=True)
class LaunchPlan:
    """What a trial starts: the argument list (never a shell string) and where it listens."""

    argv: tuple[str, ...]
    host: str
    port: int
    env: tuple[tuple[str, str], ...] = ()
    secret_flags: tuple[str, ...] = ()  # the spec's own, beyond SGLang's credential flags

    @property
    def base_url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host
        return f"http://{host}:{self.port}"

    def masked_argv(self) -> tuple[str, ...]:
        return mask_argv(self.argv, self.secret_flags)


def flag_name(param: str, version: str) -> str:
    """The flag that sets a param, as the SGLang version in use spells it."""
    searched = {f.value: f for f in SearchedField}.get(param)
    if searched is not None:
        return searched.flag(parse_version(version))
    return "--" + param.replace("_", "-")


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


def sglang_flags(
    spec: SweepSpec,
    config: ServerConfig,
    *,
    version: str,
    port: int,
    tp_size: int,
    adaptive_config_path: str = adaptive.CONFIG_FILE,
) -> list[str]:
    """SGLang's own flags for one trial, in a stable order."""
    v = parse_version(version)
    flags = [
        "--model-path",
        spec.model.path,
        "--tp-size",
        str(tp_size),
        *config_codec.memory_flags(config, v),
    ]
    if config.speculative:
        flags += [
            "--speculative-algorithm",
            spec.model.speculative_algorithm,
            "--speculative-draft-model-path",
            spec.model.draft_path,
            *config_codec.speculative_flags(config, v, adaptive_config_path),
        ]
    if spec.server.enable_metrics:
        flags.append("--enable-metrics")
    flags += list(spec.server.flags)
    flags += ["--host", spec.server.host, "--port", str(port)]
    return flags
