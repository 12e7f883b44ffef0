"""One configuration as MLflow keeps it, both ways: its launched values as text params.

Its Optuna params, the searched values before SGLang's rules, are `driver.search.space`'s
(`config_from_params`, `params_for`): one route each way, beside the suggestion that draws them. Its
command line is rendered one way only, by the engine (`engines.launch.command_argv`,
SGLang's flags in `engines.sglang.command`), and never read back: each form that needs the configuration
again (the journal, MLflow, the study) keeps it structured.

Every value is walked through the fields of `config.fields.SearchedField`, so a searched value is never
dropped by one direction and kept by the other (``speculative_adaptive`` once was: an adaptive trial
read back as a fixed one). MLflow's params, the journal (the `ServerConfig` itself, through pydantic) and
the command line hold the *launched* values, the configuration's own. An engine's own searched values
(`ServerConfig.engine_values`) travel as params named `engine_value.NAME`.
"""

from __future__ import annotations

from collections.abc import Mapping

from orchestrator.config import adaptive
from orchestrator.config.adaptive import AdaptiveMode
from orchestrator.config.fields import SearchedField as F
from orchestrator.records import ServerConfig

ParamValue = float | int | str
# An engine's own value as an MLflow param: beside the run's other params (the engine, the model, ...),
# its name alone could be taken for one of them.
ENGINE_VALUE = "engine_value."


def _mode(config: ServerConfig) -> AdaptiveMode:
    return AdaptiveMode(config.speculative_adaptive or AdaptiveMode.OFF.value)


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
    params.update({ENGINE_VALUE + name: _exact(value) for name, value in config.engine_values})
    return params


def _exact(value: float) -> str:
    """An engine's own value as text that reads back the same float (`value_text`'s six digits may not:
    the engine's values are not rounded as the fraction is)."""
    return str(int(value)) if value.is_integer() else repr(value)


def engine_value_name(param: str) -> str | None:
    """The engine's own value an MLflow param holds (its name), or None for any other param."""
    return param.removeprefix(ENGINE_VALUE) if param.startswith(ENGINE_VALUE) else None


def config_from_mlflow(params: Mapping[str, str]) -> ServerConfig | None:
    """The configuration a trial run was logged with; None when its params do not make one. Runs
    written before ``speculative_adaptive`` was a param read as fixed, which they were."""
    try:
        own = ((name, float(text)) for key, text in params.items() if (name := engine_value_name(key)))
        base = ServerConfig(
            mem_fraction_static=float(params[F.MEM_FRACTION_STATIC]),
            cuda_graph_max_bs=int(params[F.CUDA_GRAPH_MAX_BS]),
            max_running_requests=int(params[F.MAX_RUNNING_REQUESTS]),
            engine_values=tuple(sorted(own)),
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
        base.engine_values,
    )
    if mode is not AdaptiveMode.OFF and (topk != 1 or adaptive.launch_steps(mode, steps) != steps):
        raise ValueError(f"{config.label()} is no launch SGLang runs")
    return config
