"""Search strategies run against the oracle, each spending launches the way its tool would.

- `grid`: every configuration of the discretised space, in the spec's dimension order.
- `auto_benchmark`: SGLang's staged tuner as the issue describes it: from SGLang's own defaults, vary one
  server flag at a time (without speculation), keep the best base, then try the speculative settings on
  top of it. An OOM is logged and the search goes on; nothing is learned from it.
- `random`: uniform over the grid, no configuration twice.
- `plain_tpe`: Optuna's default TPE on the same `suggest_config`, OOMs told as FAIL (which TPE ignores).
- `specsweep`: the real driver, `Sweep.prepare` and `Sweep.run` (its study from `open_study`, known-good
  configurations first, the repeat check, the memory model's predicted-OOM skip, stage reports and pruning,
  `tell_outcome` and `MemoryModel.observe`), with only Ray replaced by the oracle (`benchmarks.driver`).
- `specsweep_ungrouped`: the same driver with `TPESampler(group=False)` swapped in after `open_study`: the
  ablation behind the product's `group=True` (draft tokens are only searched for top-k > 1, in a range that
  moves with steps and top-k; grouped TPE models such conditional dimensions jointly).
"""

from __future__ import annotations

import logging
import random
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import optuna
from optuna.storages import InMemoryStorage
from optuna.trial import TrialState

from benchmarks.driver import oracle_sweep, run_on_oracle
from benchmarks.oracle import Evaluation, Oracle
from orchestrator.records import ServerConfig, TrialStatus
from orchestrator.sim.args import build_parser, resolve
from orchestrator.space import suggest_config
from orchestrator.spec import Choices, FloatRange, IntRange, make_config
from orchestrator.study import REPEAT_ATTR

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Launch:
    """One server launch a strategy paid for."""

    config: ServerConfig
    status: TrialStatus
    objective: float | None  # what the strategy learned as the value (None: failed, or pruned)
    gpu_s: float  # node seconds x GPUs
    failed_at: str = ""  # the failure stage of an infeasible launch


@dataclass
class SearchRun:
    strategy: str
    seed: int
    launches: list[Launch] = field(default_factory=list)
    skipped: int = 0  # proposals the memory model ruled out: no launch, no GPU time
    mispredicted: int = 0  # launches the (ready) memory model predicted to fit that then ran out of memory
    repeats_answered: int = 0  # proposals of an already measured configuration, answered without a launch
    ask_s: float = 0.0  # wall time of the strategy's own decisions (sampler, model)

    def add(self, ev: Evaluation, gpus: int, *, stages_run: int | None = None, counted: bool = True) -> None:
        objective = ev.objective if counted else None
        stage = ev.failure.stage.value if ev.failure is not None and ev.status.infeasible else ""
        self.launches.append(Launch(ev.config, ev.status, objective, ev.seconds(stages_run) * gpus, stage))


Strategy = Callable[[Oracle, Sequence[ServerConfig], int, int], SearchRun]


def grid(oracle: Oracle, configs: Sequence[ServerConfig], budget: int, seed: int) -> SearchRun:
    """All of it, in order: the budget does not apply (it is the reference)."""
    run = SearchRun("grid", seed)
    for config in configs:
        run.add(oracle.evaluate(config), oracle.gpus)
    return run


def random_search(oracle: Oracle, configs: Sequence[ServerConfig], budget: int, seed: int) -> SearchRun:
    run = SearchRun("random", seed)
    for config in random.Random(seed).sample(list(configs), min(budget, len(configs))):
        run.add(oracle.evaluate(config), oracle.gpus)
    return run


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


def auto_benchmark(oracle: Oracle, configs: Sequence[ServerConfig], budget: int, seed: int) -> SearchRun:
    """One flag at a time from the defaults (no speculation), then every speculative setting of the space
    on top of the best base, until the budget runs out. Deterministic: `seed` is not used."""
    run = SearchRun("auto_benchmark", seed)
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
        if len(run.launches) >= budget:
            return run
        ev = oracle.evaluate(make_config(mem, gbs, mrr))
        run.add(ev, oracle.gpus)
        if ev.objective is not None and (best is None or ev.objective > best[0]):
            best = (ev.objective, (mem, gbs, mrr))
    chosen = best[1] if best is not None else default
    on_top = [
        c
        for c in configs
        if (c.mem_fraction_static, c.cuda_graph_max_bs, c.max_running_requests)
        == (round(chosen[0], 4), chosen[1], chosen[2])
    ]
    for config in on_top:
        if len(run.launches) >= budget:
            break
        run.add(oracle.evaluate(config), oracle.gpus)
    return run


def plain_tpe(oracle: Oracle, configs: Sequence[ServerConfig], budget: int, seed: int) -> SearchRun:
    run = SearchRun("plain_tpe", seed)
    study = optuna.create_study(
        direction="maximize", sampler=optuna.samplers.TPESampler(seed=seed), storage=InMemoryStorage()
    )
    while len(run.launches) < budget:
        t0 = time.perf_counter()
        trial = study.ask()
        config = suggest_config(trial, oracle.spec.search)
        run.ask_s += time.perf_counter() - t0
        ev = oracle.evaluate(config)
        run.add(ev, oracle.gpus)
        if ev.objective is not None:
            study.tell(trial, ev.objective)
        else:
            study.tell(trial, state=TrialState.FAIL)
    return run


def _drive(
    name: str, oracle: Oracle, budget: int, seed: int, sampler: optuna.samplers.BaseSampler | None = None
) -> SearchRun:
    """The real driver, `Sweep.run`, on the oracle: a launch is a record with a node; a predicted-OOM skip
    is a record without one, and a repeat answered from the record is no record at all."""
    spec = oracle.spec.model_copy(update={"sampler_seed": seed})
    sweep = oracle_sweep(spec, oracle, budget)
    if sampler is not None:
        sweep.study.sampler = sampler
    run = SearchRun(name, seed)
    t0 = time.perf_counter()
    records = run_on_oracle(sweep, oracle)
    run.ask_s = time.perf_counter() - t0
    for record in records:
        result = record.result
        if not result.node_id:
            run.skipped += 1
            continue
        pruned = any(key == "pruned_at_stage" for key, _ in record.extra_tags)
        objective = record.objective if result.status is TrialStatus.OK and not pruned else None
        failed_at = result.failure.stage.value if result.failure and result.status.infeasible else ""
        run.launches.append(
            Launch(result.config, result.status, objective, result.wall_s * oracle.gpus, failed_at)
        )
        run.mispredicted += any(
            key == "memory_model_correction" and value.startswith("predicted to fit")
            for key, value in record.extra_tags
        )
    run.repeats_answered = sum(
        1 for t in sweep.study.get_trials(deepcopy=False) if REPEAT_ATTR in t.user_attrs
    )
    return run


def specsweep(oracle: Oracle, configs: Sequence[ServerConfig], budget: int, seed: int) -> SearchRun:
    return _drive("specsweep", oracle, budget, seed)


def specsweep_ungrouped(oracle: Oracle, configs: Sequence[ServerConfig], budget: int, seed: int) -> SearchRun:
    """The ablation: the product's sampler settings but `group=False`."""
    sampler = optuna.samplers.TPESampler(
        seed=seed, multivariate=True, group=False, constant_liar=True, n_startup_trials=5
    )
    return _drive("specsweep_ungrouped", oracle, budget, seed, sampler)


STRATEGIES: dict[str, Strategy] = {
    "grid": grid,
    "auto_benchmark": auto_benchmark,
    "random": random_search,
    "plain_tpe": plain_tpe,
    "specsweep": specsweep,
    "specsweep_ungrouped": specsweep_ungrouped,
}


def quiet_optuna() -> Any:
    """Optuna logs every trial at INFO and warns about its experimental options; the benchmark runs
    thousands of trials."""
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    for name in ("orchestrator.study", "orchestrator.memory_model"):
        logging.getLogger(name).setLevel(logging.ERROR)
