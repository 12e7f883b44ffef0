"""The driver's decisions, made by the product's own `Sweep` on an in-process executor (no Ray).

The executor answers each trial at once with the benchmark oracle's figures for its configuration (a
simulated profile's memory account, stages and failures), so what is tested is only what the driver
decides: what to launch, what to answer from the record, what to learn back on --resume, what to re-queue.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import cast

import optuna
import pytest
from optuna.storages import InMemoryStorage
from optuna.trial import FrozenTrial, TrialState

from benchmarks.search.oracle_sweep import NoTracking
from benchmarks.truth.cases import CASES, case_spec
from benchmarks.truth.oracle import Oracle
from orchestrator.config.adaptive import AdaptiveMode
from orchestrator.driver.answer.best_file import BestFile
from orchestrator.driver.answer.conclusion import conclude
from orchestrator.driver.answer.confirm import rank
from orchestrator.driver.answer.study_answer import record_answer
from orchestrator.driver.answer.summary import render_table, table_rows
from orchestrator.driver.dispatch.executor import Handle, OneNodeExecutor, TrialError, TrialLost
from orchestrator.driver.loop.outcome import StopReason
from orchestrator.driver.loop.restore import restore
from orchestrator.driver.loop.settle import settle
from orchestrator.driver.loop.stop_rules import LOST_IN_A_ROW
from orchestrator.driver.loop.sweep import Sweep
from orchestrator.driver.memory.learned import MemoryModel
from orchestrator.driver.search.space import config_from_params, params_for, space_configs
from orchestrator.driver.store.journal import Journal
from orchestrator.driver.store.study import launched_count, objective_name, open_study
from orchestrator.driver.store.tracking import Tracker
from orchestrator.driver.store.trial_attrs import StudyAttr, TrialAttr
from orchestrator.records import (
    FailureKind,
    FailureStage,
    ServerConfig,
    TrialResult,
    TrialStatus,
)
from orchestrator.sim.profile import load_profile
from orchestrator.spec.search import make_config
from orchestrator.spec.sweep_spec import MemorySpec, SweepSpec
from orchestrator.trial_events import TrialEvent, TrialRequest

NODE = "node-a"


class InProcessExecutor(OneNodeExecutor):
    """One node, one slot; a submitted trial is finished at once with the oracle's result. `lose` maps a
    configuration to how many of its launches die with their node (`TrialLost`); `fail_every` makes
    every launch raise instead (`TrialLost` for a node that keeps dying, `TrialError` for a bug)."""

    def __init__(
        self,
        oracle: Oracle,
        lose: dict[ServerConfig, int] | None = None,
        fail_every: type[Exception] | None = None,
    ) -> None:
        super().__init__(NODE, float(oracle.gpus))
        self.oracle = oracle
        self.lose = dict(lose or {})
        self.fail_every = fail_every
        self.submitted: list[TrialRequest] = []
        self._requests: dict[int, TrialRequest] = {}

    def submit(self, request: TrialRequest, node_id: str) -> Handle:
        self.submitted.append(request)
        self._requests[request.number] = request
        return request.number

    def wait(self, handles: Sequence[Handle], timeout_s: float) -> tuple[list[Handle], list[TrialEvent]]:
        return list(handles)[:1], []

    def result(self, handle: Handle) -> TrialResult:
        config = self._requests[cast(int, handle)].config
        if self.fail_every is not None:
            raise self.fail_every("ValueError: zip() argument 2 is longer than argument 1")
        if self.lose.get(config, 0) > 0:
            self.lose[config] -= 1
            raise TrialLost("the node died under the trial")
        return self.oracle.evaluate(config).result(node_id=NODE)

    def launched(self, config: ServerConfig) -> int:
        return sum(1 for r in self.submitted if r.config == config)


@pytest.fixture(scope="module")
def oracle() -> Oracle:
    case = CASES["tight"]
    # These tests are about what the driver learns from launches: the prior
    # (tests/driver/memory/test_prior_model.py) would rule the failing configurations out before they launch.
    spec = case_spec(case, gpus=1).model_copy(update={"memory": MemorySpec(prior=False)})
    return Oracle(spec, load_profile(case.name))


def _status(oracle: Oracle, config: ServerConfig) -> tuple[TrialStatus, FailureStage | None]:
    r = oracle.evaluate(config).result()
    return r.status, r.failure.stage if r.failure else None


@pytest.fixture(scope="module")
def configs(oracle: Oracle) -> dict[str, ServerConfig]:
    """`good` runs; `no_kv` fails allocating its KV pool; `lower` has a lower memory fraction than `no_kv`
    (so a model that saw `no_kv` fail knows `lower` cannot start either)."""
    grid = space_configs(CASES["tight"].space)
    good = next(c for c in grid if _status(oracle, c)[0] is TrialStatus.OK)
    no_kv = max(
        (c for c in grid if _status(oracle, c) == (TrialStatus.OOM, FailureStage.KV_ALLOCATION)),
        key=lambda c: c.mem_fraction_static,
    )
    lower = next(c for c in grid if c.mem_fraction_static < no_kv.mem_fraction_static and c != no_kv)
    return {"good": good, "no_kv": no_kv, "lower": lower}


def _sweep(
    spec: SweepSpec,
    study: optuna.Study,
    executor: InProcessExecutor,
    n_trials: int,
    workdir: Path | None = None,
    proposals: bool = True,
) -> Sweep:
    tracker = cast(Tracker, NoTracking())
    return Sweep(
        spec,
        study,
        tracker,
        n_trials=n_trials,
        workdir=workdir or Path(tempfile.mkdtemp(prefix="sweep-")),
        sim_profile=None,
        executor=executor,
        proposals=proposals,
    )


def _trials_of(study: optuna.Study, config: ServerConfig) -> list[FrozenTrial]:
    return [t for t in study.get_trials() if config_from_params(t.params) == config]


def test_a_predicted_oom_is_recorded_and_never_launched(
    oracle: Oracle, configs: dict[str, ServerConfig]
) -> None:
    spec = oracle.spec
    study = open_study(spec, "skip", InMemoryStorage(), resume=False)
    for name in ("no_kv", "lower"):
        study.enqueue_trial(params_for(configs[name]))
    executor = InProcessExecutor(oracle)
    sweep = _sweep(spec, study, executor, n_trials=3)
    sweep.prepare(resume=False)
    records = sweep.run().records
    assert executor.launched(configs["no_kv"]) == 1
    assert executor.launched(configs["lower"]) == 0  # the model learned the floor from no_kv
    skipped = _trials_of(study, configs["lower"])[0]
    assert skipped.user_attrs[TrialAttr.STATUS] == TrialStatus.PREDICTED_OOM.value
    assert skipped.state is TrialState.PRUNED and skipped.constraints == {"oom": 1.0}
    record = next(r for r in records if r.number == skipped.number)
    assert record.result.status is TrialStatus.PREDICTED_OOM and not record.result.node_id
    assert sweep.skipped >= 1 and launched_count(study) == 3  # a skip costs no launch


def test_a_configuration_already_measured_is_answered_from_the_record(
    oracle: Oracle, configs: dict[str, ServerConfig]
) -> None:
    spec = oracle.spec
    study = open_study(spec, "repeat", InMemoryStorage(), resume=False)
    for _ in range(2):
        study.enqueue_trial(params_for(configs["good"]))
    executor = InProcessExecutor(oracle)
    sweep = _sweep(spec, study, executor, n_trials=2)
    sweep.prepare(resume=False)
    sweep.run()
    first, again = _trials_of(study, configs["good"])[:2]
    assert executor.launched(configs["good"]) == 1
    assert again.user_attrs[TrialAttr.REPEAT_OF] == first.number
    assert again.state is TrialState.COMPLETE and again.value == first.value
    assert sweep.repeats == 1 and len(executor.submitted) == 2  # the repeat cost no launch


def test_a_configuration_the_engine_serves_as_one_measured_is_answered_from_the_record(
    oracle: Oracle, configs: dict[str, ServerConfig]
) -> None:
    """SGLang captures graphs up to max running requests: graph bs 32 and 64 under max running 8 are one
    server. Launched under both names, its second launch measured nothing new. The driver keys what it
    measured by the engine's rule (`SameServer`), so the twin is answered from the record."""
    spec = oracle.spec
    good = configs["good"]
    low = replace(good, cuda_graph_max_bs=32, max_running_requests=8)
    twin = replace(low, cuda_graph_max_bs=64)
    study = open_study(spec, "same-server", InMemoryStorage(), resume=False)
    for config in (low, twin):
        study.enqueue_trial(params_for(config))
    executor = InProcessExecutor(oracle)
    sweep = _sweep(spec, study, executor, n_trials=2)
    sweep.prepare(resume=False)
    sweep.run()
    assert executor.launched(low) == 1 and executor.launched(twin) == 0
    first, again = _trials_of(study, low)[0], _trials_of(study, twin)[0]
    assert again.user_attrs[TrialAttr.REPEAT_OF] == first.number
    assert sweep.repeats == 1
    # The table shows the twin under its own name, as the server the trial it repeats measured (the repeat
    # once kept no label, and showed the first trial's configuration as "same configuration").
    table = render_table(table_rows(study.get_trials(), sweep.outcome.records))
    row = next(line for line in table.splitlines() if line.split()[:1] == [str(again.number)])
    assert row.endswith(twin.label()), row
    assert f"same server as trial {first.number}" in table


def test_a_resumed_sweep_rebuilds_what_it_learned_from_the_study(
    oracle: Oracle, configs: dict[str, ServerConfig]
) -> None:
    spec, storage = oracle.spec, InMemoryStorage()
    study = open_study(spec, "resume", storage, resume=False)
    for name in ("no_kv", "good"):  # no_kv first: launched, it teaches the model its floor
        study.enqueue_trial(params_for(configs[name]))
    first = _sweep(spec, study, InProcessExecutor(oracle), n_trials=2)
    first.prepare(resume=False)
    first.run()
    assert first.measured and first.memory_model.ready

    study = open_study(spec, "resume", storage, resume=True)
    executor = InProcessExecutor(oracle)
    resumed = _sweep(spec, study, executor, n_trials=3)
    resumed.prepare(resume=True)
    assert resumed.measured == first.measured  # the configurations measured, from the study alone
    assert resumed.memory_model.ready and resumed.memory_model.kv_floor == first.memory_model.kv_floor > 0
    assert resumed.memory_model.predict(configs["lower"]).skip
    assert resumed.outcome.progress.done == 2 and resumed.outcome.progress.pruned_oom == 1
    for name in ("good", "no_kv", "lower"):
        study.enqueue_trial(params_for(configs[name]))
    resumed.run()
    assert all(executor.launched(configs[name]) == 0 for name in ("good", "no_kv", "lower"))
    good_trials = _trials_of(study, configs["good"])
    assert good_trials[-1].user_attrs[TrialAttr.REPEAT_OF] == good_trials[0].number
    lower = _trials_of(study, configs["lower"])[-1]
    assert lower.user_attrs[TrialAttr.STATUS] == TrialStatus.PREDICTED_OOM.value


def test_a_lost_trial_is_requeued_once(oracle: Oracle, configs: dict[str, ServerConfig]) -> None:
    spec, good = oracle.spec, configs["good"]
    study = open_study(spec, "lost", InMemoryStorage(), resume=False)
    study.enqueue_trial(params_for(good))
    executor = InProcessExecutor(oracle, lose={good: 2})  # its first two launches die with their node
    sweep = _sweep(spec, study, executor, n_trials=2)
    sweep.prepare(resume=False)
    records = sweep.run().records
    lost = [t for t in study.get_trials() if t.user_attrs.get(TrialAttr.STATUS) == TrialStatus.LOST.value]
    assert len(lost) == 2 and executor.launched(good) >= 2
    assert all(t.state is TrialState.FAIL and not t.constraints for t in lost)  # not an OOM
    first, second = lost
    requeued = [t for t in study.get_trials() if t.user_attrs.get(TrialAttr.REQUEUED_FROM) is not None]
    assert [t.user_attrs[TrialAttr.REQUEUED_FROM] for t in requeued] == [first.number]
    assert requeued[0].number == second.number and second.params == first.params  # once, not again
    assert all(r.result.failure is not None for r in records if r.result.status is TrialStatus.LOST)
    assert launched_count(study) == 2  # lost launches cost no budget


def test_a_trial_whose_own_code_raises_is_failed_and_counted_never_relaunched_blindly(
    oracle: Oracle,
) -> None:
    # Found on a real run: the benchmark raised on every launch, each was taken as a lost node (free, and
    # re-queued), and the sweep launched 65 trials of a budget of 8 until it was killed.
    spec = oracle.spec
    study = open_study(spec, "bug", InMemoryStorage(), resume=False)
    executor = InProcessExecutor(oracle, fail_every=TrialError)
    sweep = _sweep(spec, study, executor, n_trials=3)
    sweep.prepare(resume=False)
    records = sweep.run().records
    assert len(executor.submitted) == 3  # the budget, not one more
    assert all(r.result.status is TrialStatus.FAILED for r in records)
    assert all(r.result.failure and r.result.failure.kind is FailureKind.INTERNAL_ERROR for r in records)
    assert all("zip()" in (r.result.failure.message if r.result.failure else "") for r in records)
    assert not [t for t in study.get_trials() if TrialAttr.REQUEUED_FROM in t.user_attrs]


def test_a_sweep_whose_launches_keep_getting_lost_stops_and_says_why(oracle: Oracle) -> None:
    spec = oracle.spec
    study = open_study(spec, "lost-all", InMemoryStorage(), resume=False)
    executor = InProcessExecutor(oracle, fail_every=TrialLost)
    sweep = _sweep(spec, study, executor, n_trials=3)
    sweep.prepare(resume=False)
    outcome = sweep.run()
    assert outcome.stop_reason is StopReason.ALL_LOST
    assert len(executor.submitted) == LOST_IN_A_ROW  # lost launches are free, so a limit of their own
    assert all(r.result.status is TrialStatus.LOST for r in outcome.records)


def test_a_resumed_sweep_ranks_and_confirms_every_launch_of_the_study(
    oracle: Oracle, configs: dict[str, ServerConfig], tmp_path: Path
) -> None:
    # Seen on the H200: a resumed sweep ranked only its own launches, so its verdict missed the earlier
    # ones and its confirmation relaunched a configuration already launched twice.
    spec, storage, good = oracle.spec, InMemoryStorage(), configs["good"]
    study = open_study(spec, "journal", storage, resume=False)
    study.enqueue_trial(params_for(good))
    first = _sweep(spec, study, InProcessExecutor(oracle), n_trials=1, workdir=tmp_path)
    first.prepare(resume=False)
    earlier = first.run().records
    assert [r.number for r in earlier] == [0]

    study = open_study(spec, "journal", storage, resume=True)
    resumed = _sweep(spec, study, InProcessExecutor(oracle), n_trials=2, workdir=tmp_path)
    resumed.prepare(resume=True)
    assert [r.number for r in resumed.outcome.records] == [0] and resumed.journal_complete
    assert resumed.outcome.records[0].result.stages == earlier[0].result.stages
    resumed.run()
    numbers = [r.number for r in resumed.outcome.records]
    assert numbers[0] == 0 and len(numbers) > 1 and numbers == sorted(set(numbers))
    ranked = {n for r in rank(resumed.outcome.records) for n in r.numbers}
    assert 0 in ranked  # the earlier invocation's launch is ranked with the new ones


class _TimeRunsOut(InProcessExecutor):
    """The time budget runs out while the first trial runs."""

    sweep: Sweep | None = None

    def result(self, handle: Handle) -> TrialResult:
        assert self.sweep is not None
        self.sweep.deadline = 0.0
        return super().result(handle)


def test_a_sweep_resumed_after_only_its_baseline_ran_restores_it(
    oracle: Oracle, configs: dict[str, ServerConfig], tmp_path: Path
) -> None:
    # Seen on the H200: the first invocation ran only the baseline (--time-budget), which costs no budget,
    # so --resume took the study for a new one and never read back the baseline's record: no later trial
    # got a lossless verdict.
    spec = oracle.spec.model_copy(update={"budget": oracle.spec.budget.model_copy(update={"baseline": True})})
    storage = InMemoryStorage()
    study = open_study(spec, "base-only", storage, resume=False)
    executor = _TimeRunsOut(oracle)
    first = _sweep(spec, study, executor, n_trials=2, workdir=tmp_path)
    executor.sweep = first
    first.prepare(resume=False)
    assert [r.baseline for r in first.run().records] == [True]

    study = open_study(spec, "base-only", storage, resume=True)
    resumed = _sweep(spec, study, InProcessExecutor(oracle), n_trials=2, workdir=tmp_path)
    resumed.prepare(resume=True)
    assert [r.number for r in resumed.outcome.records] == [0] and resumed.outcome.records[0].baseline
    assert resumed.baseline_tok_s is not None


def test_a_sweep_that_stopped_early_queues_no_confirmation(
    oracle: Oracle, configs: dict[str, ServerConfig], tmp_path: Path
) -> None:
    # Seen on the H200: a sweep stopped by --time-budget queued its confirmation launches and left them
    # waiting, so the resumed sweep began with confirmations before its search was over.
    spec = oracle.spec
    study = open_study(spec, "early", InMemoryStorage(), resume=False)
    study.enqueue_trial(params_for(configs["good"]))
    sweep = _sweep(spec, study, InProcessExecutor(oracle), n_trials=1, workdir=tmp_path)
    sweep.prepare(resume=False)
    sweep.run()
    sweep.confirm_reserve = 2
    sweep.outcome.stop_reason = StopReason.TIME_BUDGET
    sweep.confirm_best()
    assert not [t for t in study.get_trials() if t.state is TrialState.WAITING]


def test_settle_is_the_one_place_a_result_becomes_a_status_a_tell_and_attributes(
    oracle: Oracle, configs: dict[str, ServerConfig]
) -> None:
    """A run whose every stage misses the latency limit is SLA_MISSED (PRUNED, `sla` violated), not OK with
    a fake value; a pruned run stays OK with no value; an OOM is PRUNED with `oom` violated."""
    result = oracle.evaluate(configs["good"]).result(node_id=NODE)
    strict = oracle.spec.model_copy(
        update={"objective": oracle.spec.objective.model_copy(update={"itl_p99_ms_max": 1e-6})}
    )
    missed = settle(result, strict, pruned_at=None)
    assert missed.result.status is TrialStatus.SLA_MISSED and missed.objective is None
    assert missed.tell.state is TrialState.PRUNED and missed.tell.constraints == {
        "oom": 0.0,
        "sla": 1.0,
    }
    assert missed.attrs[TrialAttr.STATUS] == "sla_missed" and not missed.measured
    pruned = settle(result, strict, pruned_at=0)
    assert pruned.result.status is TrialStatus.OK and pruned.tell.state is TrialState.PRUNED
    ok = settle(result, oracle.spec, pruned_at=None)
    assert ok.tell.state is TrialState.COMPLETE and ok.tell.value == ok.objective == result.output_tok_per_s
    assert ok.measured and ok.attrs[TrialAttr.CONFIG] == configs["good"].label()
    oom = settle(oracle.evaluate(configs["no_kv"]).result(node_id=NODE), oracle.spec, pruned_at=None)
    assert oom.tell.state is TrialState.PRUNED and oom.tell.constraints == {"oom": 1.0}
    assert oom.attrs[TrialAttr.FAILURE_STAGE] == "kv_allocation" and TrialAttr.MEMORY in oom.attrs


def test_a_swapped_memory_model_is_the_one_that_predicts_and_learns(
    oracle: Oracle, configs: dict[str, ServerConfig]
) -> None:
    spec = oracle.spec
    study = open_study(spec, "swap", InMemoryStorage(), resume=False)
    for name in ("no_kv", "lower"):
        study.enqueue_trial(params_for(configs[name]))
    executor = InProcessExecutor(oracle)
    sweep = _sweep(spec, study, executor, n_trials=2)
    unused = sweep.memory_model
    sweep.memory_model = MemoryModel(tp=spec.node.gpus)
    sweep.prepare(resume=False)
    sweep.run()
    assert sweep.memory_model.ready and sweep.memory_model.kv_floor > 0 and not unused.ready
    assert executor.launched(configs["lower"]) == 0


def test_a_resumed_study_launches_a_fixed_proposal_its_adaptive_trial_did_not_measure(
    oracle: Oracle, configs: dict[str, ServerConfig], tmp_path: Path
) -> None:
    # --resume read an adaptive trial's Optuna params ({steps 2, adaptive default}) back as the fixed
    # steps-2 configuration: a later fixed steps-2 proposal was answered from the adaptive trial's record
    # (never launched) and the memory model relearned the adaptive launch as a fixed one.
    search = oracle.spec.search.model_copy(
        update={"speculative_adaptive": [AdaptiveMode.OFF, AdaptiveMode.DEFAULT]}
    )
    spec, storage, good = (
        oracle.spec.model_copy(update={"search": search}),
        InMemoryStorage(),
        configs["good"],
    )
    memory = (good.mem_fraction_static, good.cuda_graph_max_bs, good.max_running_requests)
    adaptive = make_config(*memory, 2, 1, None, AdaptiveMode.DEFAULT)
    fixed = make_config(*memory, 2, 1, None)
    study = open_study(spec, "adaptive", storage, resume=False)
    study.enqueue_trial({**params_for(fixed, spec.search), "speculative_adaptive": "default"})
    first = _sweep(spec, study, InProcessExecutor(oracle), n_trials=1, workdir=tmp_path)
    first.prepare(resume=False)
    first.run()
    assert set(first.measured) == {adaptive}

    study = open_study(spec, "adaptive", storage, resume=True)
    # What the memory model relearns (no journal here: from the study's attributes).
    assert [r.config for _, r in restore(study, Journal(None)).memory] == [adaptive]
    executor = InProcessExecutor(oracle)
    resumed = _sweep(spec, study, executor, n_trials=2, workdir=tmp_path)
    resumed.prepare(resume=True)
    assert set(resumed.measured) == {adaptive}
    study.enqueue_trial(params_for(fixed, spec.search))
    resumed.run()
    assert executor.launched(fixed) == 1
    (trial,) = _trials_of(study, fixed)
    assert TrialAttr.REPEAT_OF not in trial.user_attrs


class _AcceptLengths(InProcessExecutor):
    """The oracle's results, with each configuration's acceptance length set as given."""

    def __init__(self, oracle: Oracle, accept: dict[ServerConfig, float]) -> None:
        super().__init__(oracle)
        self.accept = accept

    def result(self, handle: Handle) -> TrialResult:
        result = super().result(handle)
        value = self.accept[result.config]
        stages = tuple(replace(s, accept_length=value) for s in result.stages)
        return replace(result, stages=stages, server_accept_length=value)


def test_a_tree_that_accepts_nothing_is_a_poor_tree_once_the_draft_worked_in_the_sweep(
    oracle: Oracle,
) -> None:
    """The sweep passes the draft's best acceptance so far to the diagnosis: after a tree that accepts
    well, one that accepts nothing is a poor tree, not the broken-draft alarm."""
    grid = [c for c in space_configs(CASES["tight"].space) if c.speculative]
    working, poor = [c for c in grid if oracle.evaluate(c).result().status is TrialStatus.OK][:2]
    study = open_study(oracle.spec, "tree", InMemoryStorage(), resume=False)
    for config in (working, poor):
        study.enqueue_trial(params_for(config))
    executor = _AcceptLengths(oracle, {working: 3.9, poor: 1.02})
    sweep = _sweep(oracle.spec, study, executor, n_trials=2)
    sweep.prepare(resume=False)
    records = {r.result.config: r for r in sweep.run().records}
    assert records[working].diagnosis == ""
    assert records[poor].diagnosis.startswith("poor_tree") and "3.90" in records[poor].diagnosis


def test_the_study_names_its_objective_and_holds_the_answer_best_json_gives(
    oracle: Oracle, configs: dict[str, ServerConfig], tmp_path: Path
) -> None:
    # Seen in optuna-dashboard: the axis read "Objective 0" (no metric names), and the study showed only
    # Optuna's best trial (one lucky launch) while the answer is the median of repeated launches.
    spec, storage, good = oracle.spec, InMemoryStorage(), configs["good"]
    study = open_study(spec, "answer", storage, resume=False)
    assert study.metric_names == [objective_name(spec)]
    assert objective_name(spec).startswith("output_tok_per_s")
    study.enqueue_trial(params_for(good))
    sweep = _sweep(spec, study, InProcessExecutor(oracle), n_trials=4, workdir=tmp_path)
    sweep.prepare(resume=False)
    records = sweep.run().records
    concluded = conclude(records, spec, tmp_path)
    assert concluded.best is not None
    record_answer(study, concluded.best)
    best = BestFile.read(tmp_path)
    assert best is not None
    attrs = optuna.load_study(study_name="answer", storage=storage).user_attrs
    assert attrs[StudyAttr.ANSWER_TRIALS] == best.launches
    assert attrs[StudyAttr.ANSWER_TOK_PER_S] == best.median_tok_per_s
    assert attrs[StudyAttr.ANSWER_CONFIG] == best.config_label
    assert "median" in attrs[StudyAttr.ANSWER_NOTE]


def test_a_resumed_study_created_without_metric_names_gets_them(oracle: Oracle) -> None:
    storage = InMemoryStorage()
    optuna.create_study(study_name="old", storage=storage, direction="maximize")
    study = open_study(oracle.spec, "old", storage, resume=True)
    assert optuna.load_study(study_name="old", storage=storage).metric_names == [objective_name(oracle.spec)]
    assert study.metric_names == [objective_name(oracle.spec)]
