"""SGLang's command line, rendered for the SGLang version installed on the node.

The simulated node takes exactly the same flags, so both node kinds go through `render_flags`: a bug in
the flags shows up on the laptop too. `engines.launch.command_argv` puts them after the module to run (the
one rendering of a trial's command: its launch, best_command.sh, a command read back from MLflow), and
`engines.shell` writes any engine's command for a shell.
"""

from __future__ import annotations

import re

from orchestrator.config import adaptive
from orchestrator.config.adaptive import AdaptiveMode
from orchestrator.config.codec import value_text
from orchestrator.config.fields import SearchedField as F
from orchestrator.engines.engine import TrialLaunch
from orchestrator.engines.sglang.declaration import FIELD_FLAGS
from orchestrator.records import ServerConfig


def parse_version(text: str) -> tuple[int, ...]:
    """'0.5.5.post3' -> (0, 5, 5); anything unreadable sorts as the newest release we know."""
    parts = re.findall(r"\d+", text.split("post")[0].split("rc")[0].split("dev")[0])
    return tuple(int(p) for p in parts[:3]) if parts else (0, 5, 23)


def flag_name(param: str, version: str) -> str:
    """The flag that sets a param, as the SGLang version in use spells it (what the report shows beside a
    searched value)."""
    searched = {f.value: f for f in F}.get(param)
    if searched is not None:
        return FIELD_FLAGS[searched].at(parse_version(version))
    return "--" + param.replace("_", "-")


def render_flags(launch: TrialLaunch) -> list[str]:
    """SGLang's own flags for one trial, in a stable order."""
    settings, config, v = launch.settings, launch.config, parse_version(launch.version)
    flags = [
        "--model-path",
        settings.model_path,
        "--tp-size",
        str(launch.tp_size),
        *_memory_flags(config, v),
    ]
    if config.speculative:
        flags += [
            "--speculative-algorithm",
            settings.speculative_algorithm,
            "--speculative-draft-model-path",
            settings.draft_path,
            *_speculative_flags(config, v, launch.adaptive_config_path),
        ]
    if settings.enable_metrics:
        flags.append("--enable-metrics")
    flags += list(settings.fixed_flags)
    flags += ["--host", settings.host, "--port", str(launch.port)]
    return flags


def _memory_flags(config: ServerConfig, version: tuple[int, ...]) -> list[str]:
    """The flags of the values every trial sets."""
    return _valued_flags(
        version,
        (F.MEM_FRACTION_STATIC, value_text(config.mem_fraction_static)),
        (F.CUDA_GRAPH_MAX_BS, str(config.cuda_graph_max_bs)),
        (F.MAX_RUNNING_REQUESTS, str(config.max_running_requests)),
    )


def _speculative_flags(
    config: ServerConfig, version: tuple[int, ...], adaptive_config_path: str
) -> list[str]:
    """The speculative values' flags. The three values always travel together: steps alone is an
    assertion error in SGLang. Adaptive speculation is rendered only where SGLang has it; a trial checks
    support before it launches anything."""
    flags = _valued_flags(
        version,
        (F.SPECULATIVE_NUM_STEPS, str(config.speculative_num_steps)),
        (F.SPECULATIVE_EAGLE_TOPK, str(config.speculative_eagle_topk)),
        (F.SPECULATIVE_NUM_DRAFT_TOKENS, str(config.speculative_num_draft_tokens)),
    )
    mode = AdaptiveMode(config.speculative_adaptive or AdaptiveMode.OFF.value)
    if mode is not AdaptiveMode.OFF and adaptive.supported(version):
        adaptive_flag, config_flag = FIELD_FLAGS[F.SPECULATIVE_ADAPTIVE].spellings
        flags.append(adaptive_flag)
        if mode is AdaptiveMode.TIERS:
            flags += [config_flag, adaptive_config_path]
    return flags


def _valued_flags(version: tuple[int, ...], *values: tuple[F, str]) -> list[str]:
    """Each searched field's flag, as ``version`` spells it, followed by its value's text."""
    return [word for field, text in values for word in (FIELD_FLAGS[field].at(version), text)]
