"""Search strategies, each spending noisy, paid launches (`benchmarks.noise.Launcher`) the way its tool
would, and each answering by its own rule on its own measurements.

Every strategy starts from nothing (no known-good configuration, no baseline) and runs until its
GPU-hour budget is spent (or, for a tool with a fixed plan, until the plan is done). A launch of a
configuration already launched is a new launch, paid in full and drawn anew. Unless said otherwise a
strategy recommends the configuration of its best single measurement.

- `grid`: every configuration of the discretised space once, in the spec's dimension order (no budget).
- `auto_benchmark`, `vllm_auto_tune`: SGLang's and vLLM's own tuners (`benchmarks.peers`, which cites
  the files they follow and says how their flags map onto SGLang's).
- `random`: uniform over the grid, no configuration twice.
- `plain_tpe`: Optuna's default TPE on the same `suggest_config`, OOMs told as FAIL (which TPE ignores);
  it launches whatever it proposes, repeats included, and answers with Optuna's `best_trial`.
- `gp`: Optuna's `GPSampler` with the OOM constraint (`constraints_func`); needs PyTorch, and is left out
  with a note when PyTorch is not installed.
- `informed_bound` (not a contestant): told the top K speculative trees by true value.
- specsweep and its variants: `benchmarks.specsweep_runs`.
"""

from __future__ import annotations

import importlib.util
import logging
import random
import statistics
import warnings
from collections.abc import Sequence
from typing import Any

import optuna
from optuna.storages import InMemoryStorage
from optuna.trial import FrozenTrial, TrialState

from benchmarks.noise import Launch, Launcher
from benchmarks.peers import auto_benchmark, sglang_defaults, vllm_auto_tune
from benchmarks.search_run import SearchRun, Strategy, done
from orchestrator.driver.search.space import suggest_config
from orchestrator.records import ServerConfig

# Re-exported: the harness and its tests import these from here.
__all__ = ["BOUNDS", "HAS_TORCH", "PEERS", "SearchRun", "Strategy", "done", "quiet_optuna", "sglang_defaults"]
TOP_TREES = 3  # informed_bound is told this many of the best speculative trees

log = logging.getLogger(__name__)
HAS_TORCH = importlib.util.find_spec("torch") is not None


def grid(launcher: Launcher, configs: Sequence[ServerConfig]) -> SearchRun:
    """All of it, in order: the budget does not apply (it is the reference)."""
    for config in configs:
        launcher.launch(config)
    return done("grid", launcher)


def random_search(launcher: Launcher, configs: Sequence[ServerConfig]) -> SearchRun:
    for config in random.Random(launcher.seed).sample(list(configs), len(configs)):
        if launcher.exhausted:
            break
        launcher.launch(config)
    return done("random", launcher)


def _tree(config: ServerConfig) -> tuple[int | None, int | None, int | None]:
    c = config
    return (c.speculative_num_steps, c.speculative_eagle_topk, c.speculative_num_draft_tokens)


def _oom(trial: FrozenTrial) -> Sequence[float]:
    return [float(trial.user_attrs.get("oom", 0.0))]


def _optuna_run(
    name: str, launcher: Launcher, sampler: optuna.samplers.BaseSampler, *, fail_infeasible: bool
) -> SearchRun:
    """Ask, launch, tell, until the budget is spent. With `fail_infeasible` an OOM is told as FAIL (what
    a plain set-up does, and TPE then ignores it); otherwise it is told as a zero with the `oom`
    constraint violated (the GP sampler ignores FAIL trials but learns from constraints)."""
    study = optuna.create_study(direction="maximize", sampler=sampler, storage=InMemoryStorage())
    while not launcher.exhausted:
        trial = study.ask()
        config = suggest_config(trial, launcher.oracle.spec.search)
        lc = launcher.launch(config)
        trial.set_user_attr("oom", 1.0 if lc.status.infeasible else 0.0)
        if lc.objective is not None:
            study.tell(trial, lc.objective)
        elif fail_infeasible:
            study.tell(trial, state=TrialState.FAIL)
        else:
            study.tell(trial, 0.0)
    return done(name, launcher)


def plain_tpe(launcher: Launcher, configs: Sequence[ServerConfig]) -> SearchRun:
    sampler = optuna.samplers.TPESampler(seed=launcher.seed)
    return _optuna_run("plain_tpe", launcher, sampler, fail_infeasible=True)


def gp(launcher: Launcher, configs: Sequence[ServerConfig]) -> SearchRun:
    """Optuna's GP sampler with the OOM constraint (`constraints_func`)."""
    sampler = optuna.samplers.GPSampler(seed=launcher.seed, constraints_func=_oom)
    return _optuna_run("gp", launcher, sampler, fail_infeasible=False)


PEERS: dict[str, Strategy] = {
    "grid": grid,
    "auto_benchmark": auto_benchmark,
    "vllm_auto_tune": vllm_auto_tune,
    "random": random_search,
    "plain_tpe": plain_tpe,
    **({"gp": gp} if HAS_TORCH else {}),
}
# References that are not contestants: the ceiling that noise and the budget put on any strategy.
BOUNDS: dict[str, Strategy] = {}


def quiet_optuna() -> Any:
    """Optuna logs every trial at INFO and warns about its experimental options; the benchmark runs
    thousands of trials."""
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    logging.getLogger("orchestrator.driver").setLevel(logging.ERROR)  # the memory model logs under it too


def informed_bound(launcher: Launcher, configs: Sequence[ServerConfig]) -> SearchRun:
    """Not a contestant: what the budget allows to a strategy told in advance the `TOP_TREES` best
    speculative trees by true value, each with its best memory flags, whatever their distance from the
    optimum (the best one among them is the optimum itself). It launches them in turn until the budget
    is spent and answers with the best median, so its regret is a ceiling that noise alone puts on a
    strategy that still has to tell the top trees apart."""
    truth = [(launcher.oracle.evaluate(c).objective, c) for c in configs]
    top: list[ServerConfig] = []
    for _, c in sorted(((v, c) for v, c in truth if v is not None), key=lambda vc: -vc[0]):
        if all(_tree(c) != _tree(t) for t in top):
            top.append(c)
        if len(top) == TOP_TREES:
            break

    def best_median(launches: Sequence[Launch]) -> ServerConfig | None:
        values: dict[ServerConfig, list[float]] = {}
        for lc in launches:
            if lc.objective is not None:
                values.setdefault(lc.config, []).append(lc.objective)
        return max(values, key=lambda c: statistics.median(values[c])) if values else None

    launcher.rule = best_median
    while not launcher.exhausted:
        for config in top:
            if not launcher.exhausted:
                launcher.launch(config)
    return done("informed_bound", launcher)


BOUNDS["informed_bound"] = informed_bound
