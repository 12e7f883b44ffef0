"""The pruner compares a launch's stages with launches on its own machine where the regime is
overhead-bound: there the host sets the pace, and the same tree measured 30 % less on one machine than on
another. The real pair's resumed sweep (`smollm2-sweep-h100-c-resumed`) showed it: every tree launched on
the second H100 was cut after concurrency 8 by launches of the first."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from benchmarks.truth.measured_grid import load_records
from orchestrator.driver.answer.confirm import machine
from orchestrator.driver.loop.pruning import prune_within
from orchestrator.driver.store.study import open_study
from orchestrator.driver.store.trial_attrs import TrialAttr
from orchestrator.records import TrialRecord
from orchestrator.spec.sweep_spec import load_spec

ROOT = Path(__file__).resolve().parents[3]
FIXTURE = ROOT / "tests" / "fixtures" / "sglang" / "0.5.17" / "smollm2-sweep-h100-c-resumed"
SPEC = ROOT / "trials" / "smollm2-h200.yaml"

pytestmark = pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")


def _best_so_far(record: TrialRecord) -> list[float]:
    """What the loop reports to Optuna at each stage: the best tok/s so far."""
    values, best = [], 0.0
    for stage in record.result.stages:
        best = max(best, stage.output_tok_per_s)
        values.append(best)
    return values


def _study_with(records: list[TrialRecord]) -> optuna.Study:
    """The product's study (its pruner), holding ``records`` as completed trials with their stages and
    their machine, as the loop leaves them."""
    study = open_study(load_spec(SPEC), "pair", "sqlite:///:memory:", resume=False)
    for record in records:
        trial = study.ask()
        trial.set_user_attr(TrialAttr.MACHINE, machine(record))
        for step, value in enumerate(_best_so_far(record)):
            trial.report(value, step)
        study.tell(trial, record.objective)
    return study


def _cut_after_stage_2(study: optuna.Study, record: TrialRecord, within: str | None) -> bool:
    """Whether the pruner cuts ``record``'s launch after its second stage, compared on ``within``."""
    trial = study.ask()
    trial.set_user_attr(TrialAttr.MACHINE, machine(record))
    if within is not None:
        trial.set_user_attr(TrialAttr.PRUNE_WITHIN, within)
    for step, value in enumerate(_best_so_far(record)[:2]):
        trial.report(value, step)
    return trial.should_prune()


def test_a_launch_on_a_second_machine_is_judged_by_that_machines_launches_when_overhead_bound() -> None:
    records = load_records(FIXTURE)
    first = [r for r in records if r.number <= 5 and r.objective is not None]
    second = next(r for r in records if r.number == 6)
    assert {machine(r) for r in first} != {machine(second)}, "the fixture's two machines"
    study = _study_with(first)
    # As the sweep ran: compared with the first machine's launches, the second's tree is cut ...
    assert _cut_after_stage_2(study, second, within=None)
    # ... and the loop, seeing an overhead-bound pair, compares it on its own machine, where nothing has
    # been measured yet: it runs on to its last stage.
    within = prune_within(first, machine(second))
    assert within == machine(second)
    assert not _cut_after_stage_2(study, second, within)


def test_within_one_machine_the_pruner_still_cuts_what_is_clearly_worse() -> None:
    records = load_records(FIXTURE)
    first = [r for r in records if r.number <= 5 and r.objective is not None]
    weakest = min(first[1:], key=lambda r: _best_so_far(r)[1])
    study = _study_with([r for r in first if r is not weakest])
    within = prune_within(first, machine(weakest))
    assert within == machine(weakest)
    assert _cut_after_stage_2(study, weakest, within)


def test_gpu_bound_launches_are_compared_across_machines() -> None:
    """Nodes of one kind measure a GPU-bound server within 1 % of each other: every node's launches
    are the pruner's peers (on eight nodes, judged per node, none would be cut before 32 launches)."""
    h200 = load_records(ROOT / "tests" / "fixtures" / "sglang" / "0.5.17" / "llama8b-grid")
    assert prune_within(h200, "GPU-another-node") is None
