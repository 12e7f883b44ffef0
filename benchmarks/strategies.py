"""Search strategies run against the oracle, each spending launches the way its tool would.

- `grid`: every configuration of the discretised space, in the spec's dimension order.
- `auto_benchmark`: SGLang's staged tuner as the issue describes it: from SGLang's own defaults, vary one
  server flag at a time (without speculation), keep the best base, then try the speculative settings on
  top of it. An OOM is logged and the search goes on; nothing is learned from it.
- `random`: uniform over the grid, no configuration twice.
- `plain_tpe`: Optuna's default TPE on the same `suggest_config`, OOMs told as FAIL (which TPE ignores).
- `specsweep`: the real driver's decisions (`Sweep`): its study (`open_study`: TPE with the `oom`
  constraint, constant liar, percentile pruner), known-good configurations first, the memory model's
  predicted-OOM skip, `tell_outcome` and `MemoryModel.observe`; only the Ray submission is replaced by a
  synchronous call to the oracle.
- `specsweep_group`: the same driver with `TPESampler(group=True)` swapped in after `open_study`; not the
  product's setting, an experiment: draft tokens are only searched for top-k > 1, in a range that moves
  with steps and top-k, and `group=True` lets TPE model such conditional dimensions jointly.
"""

from __future__ import annotations

import logging
import random
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import optuna
from optuna.storages import InMemoryStorage
from optuna.trial import TrialState

from benchmarks.oracle import Evaluation, Oracle
from orchestrator.records import ServerConfig, TrialStatus
from orchestrator.sim.args import build_parser, resolve
from orchestrator.space import BASELINE_ATTR, suggest_config
from orchestrator.spec import Choices, FloatRange, IntRange, SweepSpec, make_config
from orchestrator.study import KNOWN_GOOD_ATTR, REQUEUED_ATTR, Sweep, _InFlight, objective_value, open_study
from orchestrator.tracking import Tracker, TrialRecord

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


def _memory_storage() -> str:
    # `open_study` takes a storage URL; an in-memory storage object serves as well and is much faster.
    return cast(str, InMemoryStorage())


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


class _NoTracking:
    """MLflow stays out of the search benchmark: it measures decisions, not logging."""

    def log_trial(self, record: TrialRecord) -> str | None:
        return None


class OracleSweep(Sweep):
    """The driver's loop with the Ray submission replaced by the oracle, one trial at a time."""

    def __init__(
        self,
        spec: SweepSpec,
        oracle: Oracle,
        n_trials: int,
        sampler: optuna.samplers.BaseSampler | None = None,
    ) -> None:
        study = open_study(spec, spec.name, _memory_storage(), resume=False)
        if sampler is not None:
            study.sampler = sampler
        super().__init__(
            spec,
            study,
            cast(Tracker, _NoTracking()),
            n_trials=n_trials,
            workdir=Path("unused"),
            sim_profile=None,
        )
        self.oracle = oracle

    def search(self, run: SearchRun) -> SearchRun:
        """`Sweep._fill`'s decisions, then the stage reports and `_tell_and_record` as `run` does them."""
        self.prepare(resume=False)
        while self._finished_count() < self.n_trials and self.skipped < 5 * self.n_trials:
            t0 = time.perf_counter()
            trial = self.study.ask()
            config = suggest_config(trial, self.spec.search)
            baseline = bool(trial.user_attrs.get(BASELINE_ATTR))
            requeued = REQUEUED_ATTR in trial.user_attrs
            model_ready = self.model.ready
            prediction = self.model.predict(config)
            if prediction.skip and not requeued and not trial.user_attrs.get(KNOWN_GOOD_ATTR):
                self._skip(trial, config, prediction, baseline)
                run.ask_s += time.perf_counter() - t0
                continue
            run.ask_s += time.perf_counter() - t0
            ev = self.oracle.evaluate(config)
            run.mispredicted += model_ready and prediction.fits and ev.status is TrialStatus.OOM
            info = _InFlight(trial, config, time.monotonic(), baseline, requeued)
            stages_run = self._report_stages(info, ev)
            t1 = time.perf_counter()
            result = ev.result(stages_run)
            self._tell_and_record(info, result)
            run.ask_s += time.perf_counter() - t1
            counted = info.pruned_at is None and objective_value(result, self.spec) is not None
            run.add(ev, self.oracle.gpus, stages_run=stages_run, counted=counted)
        run.skipped = self.skipped
        return run

    def _report_stages(self, info: _InFlight, ev: Evaluation) -> int:
        """What `_handle_stage_reports` does as each stage arrives; returns the stages actually run."""
        for step, metrics in enumerate(ev.stages):
            info.trial.report(self._intermediate(info, step, metrics), step)
            if not info.baseline and info.trial.should_prune():
                info.pruned_at = step
                return step + 1
        return len(ev.stages)


def specsweep(oracle: Oracle, configs: Sequence[ServerConfig], budget: int, seed: int) -> SearchRun:
    spec = oracle.spec.model_copy(update={"sampler_seed": seed})
    return OracleSweep(spec, oracle, budget).search(SearchRun("specsweep", seed))


def specsweep_group(oracle: Oracle, configs: Sequence[ServerConfig], budget: int, seed: int) -> SearchRun:
    spec = oracle.spec.model_copy(update={"sampler_seed": seed})
    with warnings.catch_warnings():  # `group` is experimental in Optuna 5
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        sampler = optuna.samplers.TPESampler(
            seed=seed, multivariate=True, constant_liar=True, n_startup_trials=5, group=True
        )
    return OracleSweep(spec, oracle, budget, sampler).search(SearchRun("specsweep_group", seed))


STRATEGIES: dict[str, Strategy] = {
    "grid": grid,
    "auto_benchmark": auto_benchmark,
    "random": random_search,
    "plain_tpe": plain_tpe,
    "specsweep": specsweep,
    "specsweep_group": specsweep_group,
}


def quiet_optuna() -> Any:
    """Optuna logs every trial at INFO and warns about its experimental options; the benchmark runs
    thousands of trials."""
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    for name in ("orchestrator.study", "orchestrator.memory_model"):
        logging.getLogger(name).setLevel(logging.ERROR)
