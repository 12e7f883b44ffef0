"""One configuration in its forms, both ways: Optuna params and MLflow params.

Its third form, the command line, is rendered one way only, by the engine (`engines.launch.command_argv`,
SGLang's flags in `engines.sglang.command`), and never read back: each form that needs the configuration
again (the journal, MLflow, the study) keeps it structured.

Every form is walked through the fields of `config.fields.SearchedField`, so a searched value is never
dropped by one direction and kept by the other (``speculative_adaptive`` once was: an adaptive trial
read back as a fixed one). Two forms hold different values for the steps:

- the Optuna params are the *searched* values, before SGLang's rules: under top-k 1 the draft tokens
  are derived (not a param), and an adaptive trial's ``speculative_num_steps`` is the searched steps
  its tiers are built from, while the launch runs at the largest tier (`adaptive.launch_steps`);
- MLflow params, the journal (the `ServerConfig` itself, through pydantic) and the command line hold
  the *launched* values, the configuration's own.

With SGLang's default tiers every searched steps launches the same server (at its largest tier, 7),
so those Optuna points are one configuration; turned back into params it takes the searched steps of
the space nearest to the launch's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from orchestrator.config import adaptive
from orchestrator.config.adaptive import AdaptiveMode
from orchestrator.config.fields import SearchedField as F
from orchestrator.records import ServerConfig
from orchestrator.spec.search import Choices, IntDim, KnownGood, SearchSpace, SpecError, make_config

ParamValue = float | int | str


def _mode(config: ServerConfig) -> AdaptiveMode:
    return AdaptiveMode(config.speculative_adaptive or AdaptiveMode.OFF.value)


# --- Optuna: the searched values ---------------------------------------------------------------


def optuna_params(config: ServerConfig, space: SearchSpace | None = None) -> dict[str, ParamValue]:
    """The Optuna params `space.suggest_config` would have stored for `config` (to enqueue it).

    With `space`, the params are those the space suggests: ``speculative_adaptive`` only where it is
    searched, and an adaptive configuration's steps a searched value that launches it."""
    params: dict[str, ParamValue] = {
        F.MEM_FRACTION_STATIC: config.mem_fraction_static,
        F.CUDA_GRAPH_MAX_BS: config.cuda_graph_max_bs,
        F.MAX_RUNNING_REQUESTS: config.max_running_requests,
    }
    steps, topk = config.speculative_num_steps, config.speculative_eagle_topk
    if steps is None or topk is None:
        return params
    mode = _mode(config)
    params[F.SPECULATIVE_NUM_STEPS] = _searched_steps(mode, steps, space)
    params[F.SPECULATIVE_EAGLE_TOPK] = topk
    if topk != 1:
        if config.speculative_num_draft_tokens is not None:
            params[F.SPECULATIVE_NUM_DRAFT_TOKENS] = config.speculative_num_draft_tokens
    elif space is None or space.speculative_adaptive != [AdaptiveMode.OFF] or mode is not AdaptiveMode.OFF:
        params[F.SPECULATIVE_ADAPTIVE] = mode.value
    return params


def known_good_params(known: KnownGood, space: SearchSpace) -> dict[str, ParamValue]:
    """A known-good configuration's Optuna params, with the steps the user wrote: with adaptive
    speculation the launch's steps are the largest tier (outside the searched range for SGLang's
    defaults), and the user's are a searched value (`spec.search.known_good_problems` checks it)."""
    params = optuna_params(known.to_config(), space)
    if F.SPECULATIVE_NUM_STEPS in params:
        params[F.SPECULATIVE_NUM_STEPS] = known.speculative_num_steps
    return params


def _searched_steps(mode: AdaptiveMode, launched: int, space: SearchSpace | None) -> int:
    """A searched steps that launches at ``launched``: itself when the space has it, else the space's
    value nearest to it among those that launch the same."""
    if mode is AdaptiveMode.OFF:
        return launched
    candidates = _int_values(space.speculative_num_steps) if space is not None else [launched]
    same = [s for s in candidates if adaptive.launch_steps(mode, s) == launched]
    return min(same, key=lambda s: (abs(s - launched), s)) if same else launched


def _int_values(dim: IntDim) -> list[int]:
    if isinstance(dim, Choices):
        return sorted(int(c) for c in dim.choices)
    return list(range(dim.low, dim.high + 1, dim.step))


def config_from_optuna(params: Mapping[str, Any]) -> ServerConfig | None:
    """The configuration a trial's Optuna params stand for, with SGLang's rules applied (top-k 1
    trials have no draft-token param; an adaptive one launches at its largest tier); None when the
    params make none."""
    try:
        steps = params.get(F.SPECULATIVE_NUM_STEPS)
        base = (
            float(params[F.MEM_FRACTION_STATIC]),
            int(params[F.CUDA_GRAPH_MAX_BS]),
            int(params[F.MAX_RUNNING_REQUESTS]),
        )
        if steps is None:
            return make_config(*base)
        draft = params.get(F.SPECULATIVE_NUM_DRAFT_TOKENS)
        return make_config(
            *base,
            int(steps),
            int(params[F.SPECULATIVE_EAGLE_TOPK]),
            int(draft) if draft is not None else None,
            AdaptiveMode(params.get(F.SPECULATIVE_ADAPTIVE, AdaptiveMode.OFF.value)),
        )
    except (KeyError, TypeError, ValueError, SpecError):
        return None


# --- MLflow: the launched values, as text ------------------------------------------------------


def value_text(value: float | int) -> str:
    """As the launch command writes it (`0.71`, not `0.7100000000000001`)."""
    return f"{value:g}" if isinstance(value, float) else str(value)


def mlflow_params(config: ServerConfig) -> dict[str, str]:
    """The configuration's MLflow params: every value set, and the adaptive mode ("off" when fixed)."""
    params = {
        f.value: value_text(value)
        for f in F
        if f is not F.SPECULATIVE_ADAPTIVE and (value := getattr(config, f.value)) is not None
    }
    params[F.SPECULATIVE_ADAPTIVE] = _mode(config).value
    return params


def config_from_mlflow(params: Mapping[str, str]) -> ServerConfig | None:
    """The configuration a trial run was logged with; None when its params do not make one. Runs
    written before ``speculative_adaptive`` was a param read as fixed, which they were."""
    try:
        base = ServerConfig(
            mem_fraction_static=float(params[F.MEM_FRACTION_STATIC]),
            cuda_graph_max_bs=int(params[F.CUDA_GRAPH_MAX_BS]),
            max_running_requests=int(params[F.MAX_RUNNING_REQUESTS]),
        )
        steps = params.get(F.SPECULATIVE_NUM_STEPS)
        if not steps:
            return base
        mode = AdaptiveMode(params.get(F.SPECULATIVE_ADAPTIVE) or AdaptiveMode.OFF.value)
        return _launched(
            base,
            int(steps),
            int(params[F.SPECULATIVE_EAGLE_TOPK]),
            int(params[F.SPECULATIVE_NUM_DRAFT_TOKENS]),
            mode,
        )
    except (KeyError, ValueError):
        return None


def _launched(base: ServerConfig, steps: int, topk: int, draft: int, mode: AdaptiveMode) -> ServerConfig:
    """A speculative configuration from its launched values, which SGLang's rules leave as they are."""
    config = ServerConfig(
        base.mem_fraction_static,
        base.cuda_graph_max_bs,
        base.max_running_requests,
        steps,
        topk,
        draft,
        None if mode is AdaptiveMode.OFF else mode.value,
    )
    if mode is not AdaptiveMode.OFF and (topk != 1 or adaptive.launch_steps(mode, steps) != steps):
        raise ValueError(f"{config.label()} is no launch SGLang runs")
    return config
