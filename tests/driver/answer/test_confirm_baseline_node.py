"""The confirmation launches the baseline again when the answer never ran on the baseline's node.

Seen on the real pair (`tests/fixtures/sglang/0.5.17/smollm2-chat-h100/`): a study resumed session after
session on a fresh machine had its baseline on the first machine and its fastest trees on the fourth; the
answer said so (`answer.nodes`) but the confirmation relaunched speculative configurations only, so
nothing the product did would ever settle it. The confirmation now launches the baseline once more,
first, on the node the search ended on.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import cast

import pytest
from optuna.storages import InMemoryStorage
from optuna.trial import TrialState

from benchmarks.truth.cases import CASES, case_spec
from benchmarks.truth.oracle import Oracle
from orchestrator.driver.answer.choose import answer_launches, choose_answer
from orchestrator.driver.answer.conclusion import sweep_answer
from orchestrator.driver.answer.confirm import candidates, enqueue, machine, relaunch_baseline
from orchestrator.driver.answer.nodes import node_note
from orchestrator.driver.dispatch.executor import Handle
from orchestrator.driver.loop.sweep import Sweep
from orchestrator.driver.store.study import launched_count, open_study
from orchestrator.driver.store.trial_attrs import TrialAttr
from orchestrator.records import GpuSample, TrialRecord, TrialResult
from orchestrator.sim.nvml import FakeNvml
from orchestrator.sim.profile import load_profile
from orchestrator.spec.sweep_spec import BudgetSpec
from tests.driver.answer.test_confirm_rounds import study_of
from tests.driver.answer.test_node_note import _records
from tests.driver.loop.test_driver_decisions import InProcessExecutor
from tests.driver.loop.test_driver_decisions import _sweep as in_process_sweep
from tests.pair.test_pair_sweep import _records as _pair_records

FIRST_CONFIRMATION = 19  # the real pair's grid: trials 19-22 are its confirmation on node 5


class NodesExecutor(InProcessExecutor):
    """Moved: the first launch (the baseline) ran on a machine that is gone, every later one on another;
    otherwise every launch runs on one machine."""

    def __init__(self, oracle: Oracle, moved: bool) -> None:
        super().__init__(oracle)
        self.moved = moved
        self.nodes: list[str] = []

    def result(self, handle: Handle) -> TrialResult:
        node = "second-machine" if self.nodes and self.moved else "first-machine"
        self.nodes.append(node)
        return self.oracle.evaluate(self._requests[cast(int, handle)].config).result(node_id=node)


@pytest.fixture(scope="module")
def oracle() -> Oracle:
    case = CASES["tight"]
    spec = case_spec(case, gpus=1)
    budget = spec.budget.model_copy(update={"baseline": True})
    return Oracle(spec.model_copy(update={"budget": budget}), load_profile(case.name))


def _sweep(oracle: Oracle, executor: InProcessExecutor) -> Sweep:
    study = open_study(oracle.spec, "baseline-node", InMemoryStorage(), resume=False)
    sweep = in_process_sweep(oracle.spec, study, executor, n_trials=12, proposals=False)
    sweep.journal.folder = None
    sweep.prepare(resume=False)
    sweep.reserve_for_confirmation()
    sweep.run()
    sweep.confirm_best()
    return sweep


def _baseline_relaunches(sweep: Sweep) -> list[int]:
    return [
        t.number
        for t in sweep.study.get_trials(deepcopy=False)
        if t.user_attrs.get(TrialAttr.BASELINE) and TrialAttr.CONFIRM_OF in t.user_attrs
    ]


def test_a_baseline_on_a_node_the_answer_never_ran_on_is_launched_again(oracle: Oracle) -> None:
    executor = NodesExecutor(oracle, moved=True)
    sweep = _sweep(oracle, executor)
    records = sweep.outcome.records
    assert records[0].baseline and records[0].result.node_id == "first-machine"
    again = _baseline_relaunches(sweep)
    assert len(again) == 1, "the confirmation never relaunched the baseline"
    relaunched = next(r for r in records if r.number == again[0])
    assert relaunched.baseline and not relaunched.result.config.speculative
    assert relaunched.result.node_id == "second-machine"
    # the budget is kept: the baseline's launch came out of the confirmation's reserve (its first
    # launch, the reference, costs none)
    assert launched_count(sweep.study) == 12 and len(executor.nodes) == 13
    answer = choose_answer(answer_launches(records, sweep.lossless.lossy))
    assert answer is not None
    assert node_note(answer, records, sweep.lossless.lossy) == ""
    assert relaunch_baseline(records, sweep.lossless.lossy) is None  # a resume asks for no more


def test_a_baseline_on_the_answers_node_is_not_launched_again(oracle: Oracle) -> None:
    sweep = _sweep(oracle, NodesExecutor(oracle, moved=False))
    assert _baseline_relaunches(sweep) == []


def test_the_real_pairs_study_asks_for_the_baseline_again() -> None:
    """As it stood before its confirmation (trials 0-18), its baseline had run on node 1 and the tree its
    confirmation put first (s2k8d16) on node 5 only; the confirmation then launched it there (trial 20),
    and the study asks for nothing more."""
    records = _records()
    before = [r for r in records if r.number < FIRST_CONFIRMATION]
    baseline = relaunch_baseline(before)
    assert baseline is not None
    assert next(r for r in records if r.number == baseline).baseline
    assert relaunch_baseline(records) is None


def _on(record: TrialRecord, node_id: str, uuid: str) -> TrialRecord:
    gpus = (GpuSample(0, 81559.0, 480.0, (), uuid=uuid),)
    return replace(record, result=replace(record.result, node_id=node_id, gpu_before=gpus, gpu_after=gpus))


def test_a_study_resumed_on_the_same_machine_is_on_one_node() -> None:
    """Ray gives a node a new id each time it starts, so a sweep stopped with Ctrl-C and resumed on the same
    machine had its baseline on one node id and the rest on another: the answer said they never ran on
    one node, and the confirmation spent a launch on the baseline. The machine is its GPUs (NVML's UUIDs),
    whichever Ray node saw them; records without them (older journals) fall back to the Ray node."""
    records = _records()
    same = [_on(r, "ray-a" if r.baseline else "ray-b", "GPU-5e6f") for r in records]
    assert relaunch_baseline(same) is None
    answer = sweep_answer(same)
    assert answer is not None and node_note(answer, same) == ""
    moved = [_on(r, "ray-a", "GPU-1111") if r.baseline else _on(r, "ray-b", "GPU-2222") for r in records]
    assert relaunch_baseline(moved) is not None


def test_the_simulated_node_is_the_same_machine_whichever_ray_node_runs_it(tmp_path: Path) -> None:
    one = FakeNvml(tmp_path / "ray-a", gpu_count=2, total_mib=1000.0).snapshot()
    two = FakeNvml(tmp_path / "ray-b", gpu_count=2, total_mib=1000.0).snapshot()
    assert [s.uuid for s in one] == [s.uuid for s in two]
    assert len({s.uuid for s in one}) == 2 and all(s.uuid for s in one)


SWEEP_B = Path(__file__).resolve().parents[2] / "fixtures" / "sglang" / "0.5.17" / "smollm2-sweep-h100-b"


def test_a_confirmation_of_one_launch_relaunches_the_baseline_first() -> None:
    """The real pair's sweep resumed on a second H100 (`smollm2-sweep-h100-b`): its baseline on the first
    machine (trial 0, 5159.2 tok/s), its fastest tree found on the second (trial 4, s2k8d13, 5978.5). The
    time budget kept one confirmation launch, and the plan put the baseline after the tree's repeat, so
    the one launch repeated a tree already 71.7 % ahead of its runner-up, and the sweep answered that tree,
    "14.3 % ahead" of a baseline measured on another machine. The baseline launched on the second machine
    then measured 7775.9 tok/s (`baseline-on-b/`), 30 % ahead of the tree there. Of the confirmation's
    launches the baseline's is the one that can turn the answer: it comes first."""
    records = [r for r in _pair_records(SWEEP_B) if r.number <= 4]
    baseline = relaunch_baseline(records)
    assert baseline == 0
    study = study_of(records)
    budget = BudgetSpec(trials=9, confirm_top=2, confirm_repeats=2)
    assert enqueue(study, candidates(records), budget, reserve=1, baseline=baseline, width=1) == 1
    (queued,) = [t for t in study.get_trials(deepcopy=False) if t.state is TrialState.WAITING]
    assert queued.user_attrs.get(TrialAttr.BASELINE) and queued.user_attrs[TrialAttr.CONFIRM_OF] == 0


def test_the_baseline_on_the_second_machine_turns_the_answer() -> None:
    """What that launch measured: the same server, the same spec, on the machine of the tree's launches."""
    (base_b,) = _pair_records(SWEEP_B / "baseline-on-b")
    records = _pair_records(SWEEP_B)
    tree = next(r for r in records if r.number == 4)
    assert machine(base_b) == machine(tree) != machine(records[0])
    # its figure against the tree's on that machine: `test_pair_again`
    answer = sweep_answer([*[r for r in records if r.number <= 4], replace(base_b, number=5)])
    assert answer is not None and answer.nospec
