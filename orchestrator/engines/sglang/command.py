"""SGLang's command line, rendered for the SGLang version installed on the node.

The simulated node takes exactly the same flags, so both node kinds go through `sglang_flags`: a bug in
the flags shows up on the laptop too. `engines.launch.launch_plan` puts them after the module to run
(`engines.launch.LaunchPlan`), and `engines.shell` writes any engine's command for a shell.
"""

from __future__ import annotations

import re

from orchestrator.config import adaptive
from orchestrator.config import codec as config_codec
from orchestrator.config.fields import SearchedField
from orchestrator.records import ServerConfig
from orchestrator.spec.sweep_spec import SweepSpec


def parse_version(text: str) -> tuple[int, ...]:
    """'0.5.5.post3' -> (0, 5, 5); anything unreadable sorts as the newest release we know."""
    parts = re.findall(r"\d+", text.split("post")[0].split("rc")[0].split("dev")[0])
    return tuple(int(p) for p in parts[:3]) if parts else (0, 5, 23)


def flag_name(param: str, version: str) -> str:
    """The flag that sets a param, as the SGLang version in use spells it."""
    searched = {f.value: f for f in SearchedField}.get(param)
    if searched is not None:
        return searched.flag(parse_version(version))
    return "--" + param.replace("_", "-")


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
