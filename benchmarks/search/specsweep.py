"""specsweep in the search benchmark: the product's own sweep, end to end, answering as the CLI answers.

`Sweep.prepare`, `reserve_for_confirmation`, `run` and `confirm_best` run unchanged (the study from
`open_study`, the repeat check, the memory model's predicted-OOM skip, stage reports and pruning, the
confirmation launches the spec's budget reserves), with its executor running noisy, paid launches
(`benchmarks.search.oracle_sweep`) and the GPU-hour budget as its time budget. The answer, after every launch
and at the end, is the CLI's (`driver.answer.conclusion.sweep_answer`): nothing here ranks or confirms on its
own.

Variants change one lever each, through what a user can change (the spec's budget) or a component swapped
in after the sweep is built; the benchmark, not taste, picks what the product keeps.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import optuna

from benchmarks.launches.noisy import Launcher
from benchmarks.launches.run_record import SearchRun, Strategy
from benchmarks.search.oracle_sweep import oracle_sweep, run_on_oracle
from orchestrator.driver.loop.sweep import Sweep
from orchestrator.driver.memory.bounds import BoundedMemoryModel
from orchestrator.driver.memory.learned import MemoryModel
from orchestrator.driver.store.trial_attrs import TrialAttr
from orchestrator.records import ServerConfig

SamplerFactory = Callable[[int], optuna.samplers.BaseSampler]


@dataclass(frozen=True)
class Variant:
    """One way of running the product's sweep: spec budget fields changed (e.g. ``confirm_top``), and
    (for an ablation) a sampler or memory model swapped in after the sweep is built."""

    budget: dict[str, Any] = field(default_factory=dict)
    sampler: SamplerFactory | None = None
    memory: Callable[[], MemoryModel] | None = None  # a memory model swapped in for the product's


def run_sweep(variant: Variant, launcher: Launcher) -> Sweep:
    """The product's sweep of this variant, run to its end on `launcher` (what `drive` scores)."""
    oracle = launcher.oracle
    spec = oracle.spec.model_copy(
        update={
            "sampler_seed": launcher.seed,
            "budget": oracle.spec.budget.model_copy(update=variant.budget),
        }
    )
    sweep = oracle_sweep(spec, launcher)
    if variant.sampler is not None:
        sweep.study.sampler = variant.sampler(launcher.seed)
    if variant.memory is not None:
        sweep.memory_model = variant.memory()
    run_on_oracle(sweep)
    return sweep


def drive(name: str, variant: Variant, launcher: Launcher) -> SearchRun:
    sweep = run_sweep(variant, launcher)
    records = sweep.outcome.records
    run = SearchRun(name, launcher.seed)
    run.skipped = sum(1 for r in records if not r.result.node_id)
    run.mispredicted = sum(
        1
        for r in records
        for key, value in r.extra_tags
        if key == "memory_model_correction" and value.startswith("predicted to fit")
    )
    trials = sweep.study.get_trials(deepcopy=False)
    run.repeats_answered = sum(1 for t in trials if TrialAttr.REPEAT_OF in t.user_attrs)
    confirming = {t.number for t in trials if TrialAttr.CONFIRM_OF in t.user_attrs}
    run.confirm_launches = sum(1 for r in records if r.number in confirming and r.result.node_id)
    run.launches = list(launcher.launches)
    return run


def _tpe(**kwargs: object) -> SamplerFactory:
    def make(seed: int) -> optuna.samplers.BaseSampler:
        return optuna.samplers.TPESampler(seed=seed, **kwargs)  # type: ignore[arg-type]

    return make


# The product as it ships (the case's spec: the demo spec's budget, the best 2 configurations confirmed
# to 3 launches each), and the levers measured against it. `SearchSettings.variants` picks which run.
VARIANTS: dict[str, Variant] = {
    # As it ships: its first launch is the server without speculation (`budget.baseline`, on by default;
    # the cases' specs turn it off so that the other tests of the driver start from nothing), paid for.
    "specsweep": Variant(budget={"baseline": True}),
    # Where only speculative configurations are scored (the H200 grid's replay: one baseline was measured,
    # at memory flags specsweep's own baseline would not pick)
    "specsweep_no_baseline": Variant(budget={"baseline": False}),
    "specsweep_no_confirm": Variant(budget={"confirm_top": 0}),
    # the spec defaults a user gets without a `budget:` section: the best 3, 3 launches each
    "specsweep_top3": Variant(budget={"confirm_top": 3, "confirm_repeats": 3}),
    "specsweep_top3x5": Variant(budget={"confirm_top": 3, "confirm_repeats": 5}),
    # the learned KV-pressure and draft-ceiling rules alone (orchestrator/driver/memory/bounds.py), no prior
    "specsweep_bounds": Variant(memory=BoundedMemoryModel),
    "specsweep_ungrouped": Variant(
        sampler=_tpe(multivariate=True, group=False, constant_liar=True, n_startup_trials=5)
    ),
    "specsweep_startup10": Variant(
        sampler=_tpe(multivariate=True, group=True, constant_liar=True, n_startup_trials=10)
    ),
}


def strategy(name: str) -> Strategy:
    variant = VARIANTS[name]

    def run(launcher: Launcher, configs: Sequence[ServerConfig]) -> SearchRun:
        return drive(name, variant, launcher)

    return run
