"""Search strategies, each spending noisy, paid launches (`benchmarks.noise.Launcher`) the way its tool
would, and each answering by its own rule on its own measurements.

Every strategy starts from nothing (no known-good configuration, no baseline) and runs until its
GPU-hour budget is spent. A launch of a configuration already launched is a new launch, paid in full and
drawn anew. Unless said otherwise a strategy recommends the configuration of its best single measurement.

- `grid`: every configuration of the discretised space once, in the spec's dimension order (no budget).
- `auto_benchmark`: SGLang's three-tier tuner: from SGLang's own defaults vary one server flag at a time
  (without speculation), keep the best base, then the speculative settings on top of it. An OOM is
  logged and the search goes on; nothing is learned from it.
- `vllm_auto_tune`: vLLM's `auto_tune.sh`: from the highest memory fraction, lower it one step at a time
  until the server starts, then a grid over the other flags at that fraction.
- `random`: uniform over the grid, no configuration twice.
- `plain_tpe`: Optuna's default TPE on the same `suggest_config`, OOMs told as FAIL (which TPE ignores);
  it launches whatever it proposes, repeats included, and answers with Optuna's `best_trial`.
- `gp`: Optuna's `GPSampler` with the OOM constraint (`constraints_func`); needs PyTorch, and is left out
  with a note when PyTorch is not installed.
- specsweep and its variants: `benchmarks.specsweep_runs`.
"""

from __future__ import annotations

import importlib.util
import logging
import random
import statistics
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import optuna
from optuna.storages import InMemoryStorage
from optuna.trial import FrozenTrial, TrialState

from benchmarks.noise import Launch, Launcher
from benchmarks.oracle import Oracle
from orchestrator.records import ServerConfig
from orchestrator.sim.args import build_parser, resolve
from orchestrator.space import suggest_config
from orchestrator.spec_search import Choices, FloatRange, IntRange, make_config

log = logging.getLogger(__name__)
HAS_TORCH = importlib.util.find_spec("torch") is not None


@dataclass
class SearchRun:
    strategy: str
    seed: int
    launches: list[Launch] = field(default_factory=list)
    skipped: int = 0  # proposals the memory model ruled out: no launch, no GPU time
    mispredicted: int = 0  # launches the (ready) memory model predicted to fit that then ran out of memory
    repeats_answered: int = 0  # proposals of an already measured configuration, answered without a launch
    confirm_launches: int = 0  # launches spent confirming the top candidates


Strategy = Callable[[Launcher, Sequence[ServerConfig]], SearchRun]


def _done(name: str, launcher: Launcher) -> SearchRun:
    return SearchRun(name, launcher.seed, list(launcher.launches))


def grid(launcher: Launcher, configs: Sequence[ServerConfig]) -> SearchRun:
    """All of it, in order: the budget does not apply (it is the reference)."""
    for config in configs:
        launcher.launch(config)
    return _done("grid", launcher)


def random_search(launcher: Launcher, configs: Sequence[ServerConfig]) -> SearchRun:
    for config in random.Random(launcher.seed).sample(list(configs), len(configs)):
        if launcher.exhausted:
            break
        launcher.launch(config)
    return _done("random", launcher)


def _values(dim: FloatRange | IntRange | Choices) -> list[float]:
    if isinstance(dim, Choices):
        return sorted(float(c) for c in dim.choices)
    step = dim.step or 1
    count = round((dim.high - dim.low) / step) + 1
    return [round(dim.low + k * step, 6) for k in range(count)]


def _nearest(values: list[float], target: float) -> float:
    return min(values, key=lambda v: (abs(v - target), v))


def sglang_defaults(oracle: Oracle) -> tuple[float, int, int]:
    """SGLang's own choices for a speculative launch that sets none of the searched flags (auto
    `mem_fraction_static`, graph batch by GPU size, requests reset to 48), snapped to the space."""
    spec, profile = oracle.spec, oracle.profile
    argv = [
        "--model-path", spec.model.path, "--tp-size", str(oracle.gpus),
        "--speculative-algorithm", spec.model.speculative_algorithm,
        "--speculative-draft-model-path", spec.model.draft_path,
        "--sim-profile", profile.name, "--sim-state-dir", "/nonexistent",
    ]  # fmt: skip
    args = resolve(build_parser().parse_args(argv), profile, frozenset())
    space = spec.search
    return (
        _nearest(_values(space.mem_fraction_static), args.mem_fraction_static),
        int(_nearest(_values(space.cuda_graph_max_bs), args.cuda_graph_max_bs)),
        int(_nearest(_values(space.max_running_requests), float(args.max_running_requests or 48))),
    )


def auto_benchmark(launcher: Launcher, configs: Sequence[ServerConfig]) -> SearchRun:
    """One flag at a time from the defaults (no speculation), then every speculative setting of the space
    on top of the best base, until the budget runs out."""
    oracle = launcher.oracle
    space = oracle.spec.search
    default = sglang_defaults(oracle)
    bases: list[tuple[float, int, int]] = [default]
    for axis, dim in enumerate(
        (space.mem_fraction_static, space.cuda_graph_max_bs, space.max_running_requests)
    ):
        for value in _values(dim):
            base = list(default)
            base[axis] = value
            point = (float(base[0]), int(base[1]), int(base[2]))
            if point not in bases:
                bases.append(point)
    best: tuple[float, tuple[float, int, int]] | None = None
    for mem, gbs, mrr in bases:
        if launcher.exhausted:
            return _done("auto_benchmark", launcher)
        lc = launcher.launch(make_config(mem, gbs, mrr))
        if lc.objective is not None and (best is None or lc.objective > best[0]):
            best = (lc.objective, (mem, gbs, mrr))
    chosen = best[1] if best is not None else default
    for config in configs:
        if launcher.exhausted:
            break
        if (config.mem_fraction_static, config.cuda_graph_max_bs, config.max_running_requests) == (
            round(chosen[0], 4),
            chosen[1],
            chosen[2],
        ):
            launcher.launch(config)
    return _done("auto_benchmark", launcher)


def _tree(config: ServerConfig) -> tuple[int | None, int | None, int | None]:
    c = config
    return (c.speculative_num_steps, c.speculative_eagle_topk, c.speculative_num_draft_tokens)


def vllm_auto_tune(launcher: Launcher, configs: Sequence[ServerConfig]) -> SearchRun:
    """The highest fraction first, one step lower after each failed start (SGLang's other defaults and the
    space's tree nearest the usual 3/1/4), then every configuration at the first fraction that started."""
    oracle = launcher.oracle
    _, gbs, mrr = sglang_defaults(oracle)
    trees = sorted(
        {_tree(c) for c in configs},
        key=lambda t: tuple(abs((v or 0) - w) for v, w in zip(t, (3, 1, 4), strict=True)),
    )
    first = trees[0]
    fractions = sorted(_values(oracle.spec.search.mem_fraction_static), reverse=True)
    chosen = fractions[-1]
    for mem in fractions:
        if launcher.exhausted:
            return _done("vllm_auto_tune", launcher)
        config = make_config(mem, gbs, mrr, *first)
        lc = launcher.launch(config)
        if lc.failed_at == "" or lc.failed_at == "under_load":
            chosen = mem
            break
    for config in configs:
        if launcher.exhausted:
            break
        if config.mem_fraction_static == round(chosen, 4) and launcher.launches_of(config) == 0:
            launcher.launch(config)
    return _done("vllm_auto_tune", launcher)


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
    return _done(name, launcher)


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
    for name in ("orchestrator.driver", "orchestrator.memory_model"):
        logging.getLogger(name).setLevel(logging.ERROR)


def informed_bound(launcher: Launcher, configs: Sequence[ServerConfig]) -> SearchRun:
    """Not a contestant: what the budget allows to a strategy told in advance the three best speculative
    trees (each with its best memory flags). It launches them in turn until the budget is spent and answers
    with the best median, so its hit rate is a ceiling that noise alone puts on a strategy that still has
    to tell the top trees apart (the memory flags barely move the speed, the tree does)."""
    truth = [(launcher.oracle.evaluate(c).objective, c) for c in configs]
    top: list[ServerConfig] = []
    for _, c in sorted(((v, c) for v, c in truth if v is not None), key=lambda vc: -vc[0]):
        if all(_tree(c) != _tree(t) for t in top):
            top.append(c)
        if len(top) == 3:
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
    return _done("informed_bound", launcher)


BOUNDS["informed_bound"] = informed_bound
