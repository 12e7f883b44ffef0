"""The ask/tell loop: Optuna proposes, Ray runs one trial per node, the driver tells and records.

Only this driver touches the Optuna storage and MLflow. An OOM is told as PRUNED with the constraint
`oom` violated, so the sampler learns the boundary; other failures are FAIL with a reason and never
count as infeasible. Each benchmark stage is reported as an intermediate value, so the pruner can
stop a configuration that is already clearly worse.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from typing import Any

import optuna
import ray
from optuna.trial import TrialState

from orchestrator import cluster, confirm, health
from orchestrator.diagnosis import accept_length, diagnose
from orchestrator.driver.attrs import StudyAttr, TrialAttr
from orchestrator.lossless import LosslessCheck
from orchestrator.memory_bounds import BoundedMemoryModel
from orchestrator.memory_model import Prediction, kv_heads_of
from orchestrator.records import (
    Failure,
    FailureKind,
    FailureStage,
    ServerConfig,
    StageMetrics,
    TrialResult,
    TrialStatus,
)
from orchestrator.space import baseline_config, config_params, suggest_config
from orchestrator.spec import SpecError, SweepSpec, make_config
from orchestrator.study_lock import DriverLease, close_dead_drivers_trials, closed_numbers, make_storage
from orchestrator.tracking import Tracker, TrialRecord
from orchestrator.trial import TrialRequest
from orchestrator.trial_events import PhaseEvent

log = logging.getLogger(__name__)
OOM_CONSTRAINT = "oom"
SLA_CONSTRAINT = "sla"  # ran, but no stage met the spec's latency limits
_FREE_STATUSES = frozenset({TrialStatus.PREDICTED_OOM.value, TrialStatus.LOST.value})


@dataclass
class Progress:
    done: int = 0
    running: int = 0
    pruned_oom: int = 0
    failed: int = 0
    best_tok_s: float | None = None
    best_number: int | None = None
    phases: dict[int, PhaseEvent] = field(default_factory=dict)  # running trials by number


@dataclass
class _InFlight:
    trial: optuna.Trial
    config: ServerConfig
    started: float
    baseline: bool
    requeued: bool
    pruned_at: int | None = None


class StopReason(StrEnum):
    """Why a sweep stopped launching trials."""

    BUDGET_DONE = "budget_done"  # every trial of the budget ran
    TIME_BUDGET = "time_budget"  # --time-budget ran out; running trials finished
    ONLY_REPEATS = "only_repeats"  # the sampler kept proposing configurations already measured
    ALL_SKIPPED = "all_skipped"  # the memory model ruled out almost every proposal

    def explain(self) -> str:
        return {
            StopReason.BUDGET_DONE: "the trial budget is spent",
            StopReason.TIME_BUDGET: "the time budget ran out (no new trial after --time-budget seconds)",
            StopReason.ONLY_REPEATS: "the sampler only proposed configurations already measured: "
            "the space is exhausted at this budget",
            StopReason.ALL_SKIPPED: "the memory model rules out almost every proposal: widen the space "
            "(higher mem_fraction_static, smaller cuda_graph_max_bs)",
        }[self]


@dataclass
class SweepOutcome:
    records: list[TrialRecord] = field(default_factory=list)
    progress: Progress = field(default_factory=Progress)
    stop_reason: StopReason = StopReason.BUDGET_DONE


def objective_value(result: TrialResult, spec: SweepSpec) -> float | None:
    """The best stage's tok/s among the stages that meet the spec's latency limits."""
    obj = spec.objective
    values = [
        s.output_tok_per_s
        for s in result.stages
        if s.completed > 0
        and (obj.itl_p99_ms_max is None or s.itl_p99_ms <= obj.itl_p99_ms_max)
        and (obj.ttft_p99_ms_max is None or s.ttft_p99_ms <= obj.ttft_p99_ms_max)
    ]
    return max(values) if values else None


def open_study(
    spec: SweepSpec, name: str, storage: str | optuna.storages.BaseStorage, resume: bool
) -> optuna.Study:
    """Create the study, or load it with `resume`. A study is never deleted: the CLI refuses to start a
    new one under a name already taken (study_lock and sweep.py say so before anything starts)."""
    if isinstance(storage, str) and not storage.startswith("sqlite:///:memory:"):
        storage = make_storage(storage)
    # A resumed study's sampler must not replay the proposals its first invocation already made.
    seed = spec.sampler_seed
    if resume:
        try:
            seed += len(optuna.load_study(study_name=name, storage=storage).trials)
        except KeyError:
            pass
    # group=True: the speculative values exist only together and draft tokens only for top-k > 1, so the
    # space is conditional; grouped multivariate TPE models each sub-space jointly (benchmarks/: it
    # reaches 98 % of the best in more runs on every profile than the ungrouped sampler).
    sampler = optuna.samplers.TPESampler(
        seed=seed, multivariate=True, group=True, constant_liar=True, n_startup_trials=5
    )
    # Cut only what is clearly worse (Optuna's percentile is what is *kept*: 75 prunes the bottom
    # quarter), and only after two stages: a configuration built for high concurrency may be ordinary
    # at low concurrency.
    pruner = optuna.pruners.PercentilePruner(75.0, n_startup_trials=4, n_warmup_steps=1)
    study = optuna.create_study(
        study_name=name,
        storage=storage,
        direction="maximize",
        sampler=sampler,
        pruner=pruner,
        load_if_exists=True,
    )
    study.set_user_attr(StudyAttr.SPEC_NAME, spec.name)
    return study


def tell_outcome(
    study: optuna.Study, trial: optuna.Trial, status: TrialStatus, objective: float | None, pruned: bool
) -> None:
    """Tell Optuna what happened so that the sampler learns from it.

    Infeasible outcomes (OOM at start-up or under load, predicted OOM) are PRUNED with the `oom`
    constraint violated: TPE reads constraints of PRUNED trials and ignores FAIL ones, which is why other
    tuners retry OOMs. A trial that ran but met no latency limit is PRUNED with the `sla` constraint
    violated (a value of 0 would teach TPE a fake zero). A crash, a timeout or a lost node is FAIL: it
    says nothing about memory.
    """
    if status.infeasible:
        trial.set_constraint(OOM_CONSTRAINT, 1.0)
        study.tell(trial, state=TrialState.PRUNED)
    elif status is TrialStatus.SLA_MISSED:
        trial.set_constraint(OOM_CONSTRAINT, 0.0)
        trial.set_constraint(SLA_CONSTRAINT, 1.0)
        study.tell(trial, state=TrialState.PRUNED)
    elif status is TrialStatus.OK:
        trial.set_constraint(OOM_CONSTRAINT, 0.0)
        trial.set_constraint(SLA_CONSTRAINT, 0.0)
        if pruned or objective is None:
            study.tell(trial, state=TrialState.PRUNED)
        else:
            study.tell(trial, objective)
    else:
        study.tell(trial, state=TrialState.FAIL)


def launched_count(study: optuna.Study) -> int:
    """Trials that count against the budget: launched and finished. A predicted-OOM skip costs no GPU
    time, a trial lost with its node, or closed for a dead or interrupted driver, says nothing about
    its configuration (it is re-queued), and the baseline is a reference: none of them uses up a launch."""
    closed = closed_numbers(study)
    return sum(
        1
        for t in study.get_trials(deepcopy=False)
        if t.state.is_finished()
        and t.number not in closed
        and TrialAttr.CLOSED not in t.user_attrs
        and TrialAttr.WARM_START_FROM not in t.user_attrs
        and TrialAttr.REPEAT_OF not in t.user_attrs
        and not t.user_attrs.get(TrialAttr.BASELINE)  # a reference, not a candidate: it costs no budget
        and t.user_attrs.get(TrialAttr.STATUS) not in _FREE_STATUSES
    )


class Sweep:
    confirm_reserve = 0  # launches kept back for confirmation (reserve_for_confirmation)

    def __init__(
        self,
        spec: SweepSpec,
        study: optuna.Study,
        tracker: Tracker,
        *,
        n_trials: int,
        workdir: Path,
        sim_profile: dict[str, Any] | None,
        on_progress: Callable[[Progress], None] = lambda p: None,
        on_record: Callable[[TrialRecord], None] = lambda r: None,
        time_budget_s: float | None = None,
        lease: DriverLease | None = None,
    ) -> None:
        self.spec = spec
        self.lease = lease
        self.study = study
        self.tracker = tracker
        self.n_trials = n_trials
        self.workdir = workdir
        self.sim_profile = sim_profile
        self.on_progress = on_progress
        self.on_record = on_record
        self.outcome = SweepOutcome()
        # No new launch after this moment; running trials finish (a later --resume goes on).
        self.deadline = time.monotonic() + time_budget_s if time_budget_s else None
        self.baseline_tok_s: float | None = None
        self._inflight: dict[Any, _InFlight] = {}
        self._by_number: dict[int, Any] = {}
        # The learned memory model, plus the bounds only failures teach (KV pressure per speculative tree,
        # the fraction above which the draft no longer fits): benchmarks/ showed a third fewer OOM launches.
        self.model = BoundedMemoryModel(tp=spec.node.gpus, kv_heads=kv_heads_of(spec.model.path))
        self.nodes = health.NodeHealth()
        self._node_of: dict[Any, str] = {}
        self.skipped = 0
        self.repeats = 0
        self._measured: dict[ServerConfig, tuple[int, TrialStatus, float | None]] = {}
        self.broken_warned = False
        self.broken_trials = 0  # speculative trials that accepted almost nothing
        self.best_accept: float | None = None  # the draft's best acceptance length so far
        self.lossless = LosslessCheck(spec, tracker)

    # -- study bookkeeping ------------------------------------------------------------------------

    def prepare(self, resume: bool) -> None:
        """Close trials a dead driver left RUNNING (re-queueing their configurations), and on a new
        study enqueue the baseline and the known-good configurations first."""
        close_dead_drivers_trials(self.study, me=self.lease.stamp.driver_id if self.lease else None)
        if resume and self._finished_count() > 0:
            self._restore()
            return
        known = [k.to_config() for k in self.spec.known_good]
        if self.spec.budget.baseline:
            self.study.enqueue_trial(
                baseline_config(self.spec.search, known[0] if known else None),
                user_attrs={TrialAttr.BASELINE: True},
                skip_if_exists=True,
            )
        for config in known:
            self.study.enqueue_trial(
                config_params(config), user_attrs={TrialAttr.KNOWN_GOOD: True}, skip_if_exists=True
            )

    def _finished_count(self) -> int:
        return launched_count(self.study)

    def _restore(self) -> None:
        """Rebuild what the driver learned from the study's finished trials, so a resumed sweep neither
        relaunches a configuration it has measured nor proposes what its memory model rules out."""
        p = self.outcome.progress
        closed = closed_numbers(self.study)
        for t in self.study.get_trials(deepcopy=False):
            if (
                not t.state.is_finished()
                or t.number in closed
                or TrialAttr.CLOSED in t.user_attrs
                or TrialAttr.WARM_START_FROM in t.user_attrs
            ):
                continue
            status = _status_of(t)
            if status is None:
                continue
            if TrialAttr.REPEAT_OF not in t.user_attrs and status is not TrialStatus.PREDICTED_OOM:
                p.done += 1
            if status.infeasible:
                p.pruned_oom += 1
            elif status is not TrialStatus.OK:
                p.failed += 1
            tok = t.user_attrs.get(TrialAttr.OUTPUT_TOK_PER_S)
            if t.user_attrs.get(TrialAttr.BASELINE) and tok:
                self.baseline_tok_s = float(tok)
            if (
                t.state == TrialState.COMPLETE
                and t.value is not None
                and (p.best_tok_s is None or t.value > p.best_tok_s)
            ):
                p.best_tok_s, p.best_number = t.value, t.number
            config = config_from_params(t.params)
            if config is None or TrialAttr.REPEAT_OF in t.user_attrs:
                continue
            pruned = t.state == TrialState.PRUNED and not status.infeasible
            if (status is TrialStatus.OK and not pruned) or status.infeasible:
                value = t.value if t.state == TrialState.COMPLETE else None
                self._measured.setdefault(config, (t.number, status, value))
            memory = t.user_attrs.get(TrialAttr.MEMORY)
            if isinstance(memory, dict) and status is not TrialStatus.PREDICTED_OOM:
                self.model.observe(t.number, _replayed_result(t, config, status, memory))

    # -- the loop ------------------------------------------------------------------------------------

    def run(self) -> SweepOutcome:
        events = cluster.open_events()
        p = self.outcome.progress
        try:
            while True:
                self._fill(events.actor)
                if not self._inflight:
                    break
                # The events' ref is waited on beside the trials': a stage report wakes the driver at once.
                ready, _ = ray.wait([*self._inflight, events.pending()], num_returns=1, timeout=1.0)
                self._handle_stage_reports(events, ready)
                for ref in ready:
                    if ref in self._inflight:
                        p.phases.pop(self._inflight[ref].trial.number, None)
                        self._finish(ref)
                        events.node_health(self.nodes.board())
                p.running = len(self._inflight)
                self.on_progress(p)
        finally:
            for ref, info in list(self._inflight.items()):
                ray.cancel(ref, force=True)
                self._close_interrupted(info)
            events.close()
        return self.outcome

    def _close_interrupted(self, info: _InFlight) -> None:
        """A trial cut short by Ctrl-C, SIGTERM or an error in the driver measured nothing: close it and
        queue its configuration again, so that --resume runs it and the budget is not spent on it."""
        trial = info.trial
        try:
            trial.set_user_attr(TrialAttr.CLOSED, "interrupted: the driver stopped")
            self.study.tell(trial, state=TrialState.FAIL)
        except (ValueError, RuntimeError) as err:  # already closed elsewhere: nothing left to do
            log.warning("trial %d could not be closed: %s", trial.number, err)
            return
        if self.lease is not None:
            self.lease.untrack(trial._trial_id)
        self.study.enqueue_trial(
            dict(trial.params), user_attrs={TrialAttr.REQUEUED_FROM: trial.number, **_bl(trial.user_attrs)}
        )

    def _stop(self, reason: StopReason, message: str = "") -> None:
        if self.outcome.stop_reason is StopReason.BUDGET_DONE:
            self.outcome.stop_reason = reason
            if message:
                log.warning("%s", message)

    def _fill(self, broker: Any) -> None:
        slots = max(cluster.trial_slots(), 1)
        while len(self._inflight) < slots and self._finished_count() + len(self._inflight) < self.n_trials:
            if self.deadline is not None and time.monotonic() > self.deadline:
                self._stop(StopReason.TIME_BUDGET)
                return
            if self.repeats >= 20 * self.n_trials:
                self._stop(StopReason.ONLY_REPEATS)
                return
            if self.skipped >= 5 * self.n_trials:
                self._stop(StopReason.ALL_SKIPPED)
                return
            node_id = health.pick_node(
                cluster.alive_nodes(),
                busy=set(self._node_of.values()),
                quarantined=set(self.nodes.quarantined_nodes),
                gpus=self.spec.node.gpus,
            )
            if node_id is None:
                if not self._inflight and not cluster.alive_nodes():
                    raise RuntimeError("no alive node with a trial slot is left")
                if not self._inflight and self.nodes.quarantined_nodes:
                    raise RuntimeError("every node failed GPU hygiene: " + "; ".join(self.nodes.report()))
                return
            trial = self.study.ask()
            if self.lease is not None:
                self.lease.track(trial._trial_id)
            config = suggest_config(trial, self.spec.search)
            baseline = bool(trial.user_attrs.get(TrialAttr.BASELINE))
            # A confirmation launch is launched whatever the record or the memory model says (and, like a
            # re-queued trial, is not re-queued again if its node dies).
            requeued = TrialAttr.REQUEUED_FROM in trial.user_attrs or TrialAttr.CONFIRM_OF in trial.user_attrs
            seen = self._measured.get(config)
            if seen is not None and not requeued:
                self._repeat(trial, seen)
                continue
            prediction = self.model.predict(config)
            if prediction.skip and not requeued and not trial.user_attrs.get(TrialAttr.KNOWN_GOOD):
                self._skip(trial, config, prediction, baseline)
                continue
            request = TrialRequest(
                spec=self.spec,
                config=config,
                number=trial.number,
                workdir=str(self.workdir / "trials" / f"{trial.number:04d}"),
                sim_profile=self.sim_profile,
            )
            ref = cluster.submit(request, broker, node_id)
            self._node_of[ref] = node_id
            health.record_running(node_id, True)
            self._inflight[ref] = _InFlight(trial, config, time.monotonic(), baseline, requeued)
            self._by_number[trial.number] = ref
            log.info("trial %d started: %s", trial.number, config.label())

    # -- confirmation (orchestrator.confirm) ---------------------------------------------------------

    def reserve_for_confirmation(self) -> int:
        """Keep the budget's confirmation launches back from the search (call before ``run``); returns
        how many. ``n_trials`` then counts the search's launches only, until ``confirm_best``."""
        self.confirm_reserve = confirm.reserved_launches(self.spec.budget, self.n_trials)
        self.n_trials -= self.confirm_reserve
        return self.confirm_reserve

    def confirm_best(self) -> SweepOutcome:
        """After the search: launch the top configurations again until each has ``confirm_repeats``
        launches, through the same loop (the confirmation bypasses the repeat-from-record rule)."""
        enqueued = confirm.enqueue(self.study, self.outcome.records, self.spec.budget, self.confirm_reserve)
        if not enqueued:
            return self.outcome
        # Exactly the enqueued launches: the loop asks the sampler for nothing new.
        self.n_trials = self._finished_count() + enqueued
        return self.run()

    def _repeat(self, trial: optuna.Trial, seen: tuple[int, TrialStatus, float | None]) -> None:
        """TPE proposes a configuration it has already measured once it settles: answer from the record
        instead of spending another launch (the study still learns the value)."""
        number, status, objective = seen
        self.repeats += 1
        trial.set_user_attr(TrialAttr.REPEAT_OF, number)
        trial.set_user_attr(TrialAttr.STATUS, status.value)
        tell_outcome(self.study, trial, status, objective, pruned=False)
        log.info("trial %d repeats trial %d: answered from the record", trial.number, number)

    def _skip(
        self, trial: optuna.Trial, config: ServerConfig, prediction: Prediction, baseline: bool
    ) -> None:
        """Spend no GPU time on what cannot fit: the study learns it as infeasible all the same."""
        self.skipped += 1
        result = TrialResult(
            config=config,
            status=TrialStatus.PREDICTED_OOM,
            node_id="",
            command=(),
            failure=Failure(
                prediction.stage or FailureStage.KV_ALLOCATION,
                FailureKind.OOM,
                f"predicted: {prediction.reason}",
            ),
            predicted=prediction.figures(),
        )
        info = _InFlight(trial, config, time.monotonic(), baseline, requeued=True)
        self._tell_and_record(info, result)

    def _handle_stage_reports(self, events: Any, ready: list[Any]) -> None:
        for event in events.take(ready):
            ref = self._by_number.get(event.number)
            info = self._inflight.get(ref) if ref is not None else None
            if info is None:
                continue
            if isinstance(event, PhaseEvent):
                self.outcome.progress.phases[event.number] = event
                continue
            step, metrics = event.step, event.metrics
            value = self._intermediate(info, step, metrics)
            info.trial.report(value, step)
            last = step >= len(self.spec.workload.concurrency) - 1
            # After the last stage there is nothing left to save: a finished trial is never pruned.
            # A confirmation launch is never pruned: its whole point is one more full measurement.
            confirming = TrialAttr.CONFIRM_OF in info.trial.user_attrs
            keep_going = info.baseline or last or confirming or not info.trial.should_prune()
            if not keep_going:
                info.pruned_at = step
            events.decide(event.number, step, keep_going)

    def _intermediate(self, info: _InFlight, step: int, metrics: StageMetrics) -> float:
        # The best tok/s so far: monotonic in the step, as the percentile pruner expects.
        best = info.trial.user_attrs.get(TrialAttr.BEST_SO_FAR, 0.0)
        value = max(float(best), metrics.output_tok_per_s)
        info.trial.set_user_attr(TrialAttr.BEST_SO_FAR, value)
        return value

    def _finish(self, ref: Any) -> None:
        info = self._inflight.pop(ref)
        self._by_number.pop(info.trial.number, None)
        node_id = self._node_of.pop(ref, "")
        health.record_running(node_id, False)
        try:
            result: TrialResult = ray.get(ref)
        except (ray.exceptions.RayError, OSError) as err:
            result = self._lost(info, err)
        self._tell_and_record(info, result)

    def _lost(self, info: _InFlight, err: Exception) -> TrialResult:
        """The node or the worker died under the trial: not an OOM, and worth one more try elsewhere."""
        log.error("trial %d lost: %s", info.trial.number, err)
        if not info.requeued:
            params = {**info.trial.params}
            self.study.enqueue_trial(
                params,
                user_attrs={TrialAttr.REQUEUED_FROM: info.trial.number, TrialAttr.BASELINE: info.baseline},
            )
        return TrialResult(
            config=info.config,
            status=TrialStatus.LOST,
            node_id="",
            command=(),
            failure=Failure(FailureStage.UNDER_LOAD, FailureKind.NODE_LOST, str(err).splitlines()[0][:500]),
            wall_s=time.monotonic() - info.started,
        )

    def _tell_and_record(self, info: _InFlight, result: TrialResult) -> None:
        trial, p = info.trial, self.outcome.progress
        objective = objective_value(result, self.spec) if result.status is TrialStatus.OK else None
        ran = any(s.completed > 0 for s in result.stages)
        if objective is None and result.status is TrialStatus.OK and info.pruned_at is None and ran:
            result = replace(result, status=TrialStatus.SLA_MISSED)
        attrs: dict[str, Any] = {
            TrialAttr.STATUS: result.status.value,
            TrialAttr.CONFIG: result.config.label(),
            TrialAttr.NODE_ID: result.node_id,
            TrialAttr.OUTPUT_TOK_PER_S: result.output_tok_per_s,
            # What the end-of-run table shows, so that after --resume it lists the earlier trials too.
            **result.table_figures(),
        }
        if result.failure is not None:
            attrs[TrialAttr.FAILURE] = (
                f"{result.failure.stage.value}/{result.failure.kind.value}: {result.failure.message}"
            )
            attrs[TrialAttr.FAILURE_STAGE] = result.failure.stage.value
        if result.memory:
            attrs[TrialAttr.MEMORY] = dict(result.memory)
        fraction = result.resolved_args.get("mem_fraction_static")
        if isinstance(fraction, int | float):
            attrs[TrialAttr.RESOLVED_MEM_FRACTION] = float(fraction)
        if _finished_elsewhere(self.study, trial):
            # Another process closed it (a second driver that should have been refused, by hand): the
            # result is still recorded in MLflow below, but the study cannot take it any more.
            log.error("trial %d was closed by another process; its result goes to MLflow only", trial.number)
        else:
            for key, value in attrs.items():
                trial.set_user_attr(key, value)
            tell_outcome(self.study, trial, result.status, objective, pruned=info.pruned_at is not None)
        if self.lease is not None:
            self.lease.untrack(trial._trial_id)
        if result.status.infeasible:
            p.pruned_oom += 1
        elif result.status is TrialStatus.OK:
            if (
                objective is not None
                and info.pruned_at is None
                and (p.best_tok_s is None or objective > p.best_tok_s)
            ):
                p.best_tok_s, p.best_number = objective, trial.number
        else:
            p.failed += 1
        if result.status is not TrialStatus.PREDICTED_OOM:
            p.done += 1
            health.record_trial_finished(result.status)
            if result.gpu_after:
                health.record_gpu_samples(
                    result.node_id, result.gpu_after, "GPUs not clean" not in " ".join(result.notes)
                )
            if self.nodes.observe(result):
                log.error(
                    "node %s taken out of the rotation: %s", result.node_id, "; ".join(self.nodes.report())
                )
        if p.best_tok_s:
            health.record_best(p.best_tok_s)
        if (result.status is TrialStatus.OK and info.pruned_at is None) or result.status.infeasible:
            self._measured.setdefault(result.config, (trial.number, result.status, objective))
        corrections = self.model.observe(trial.number, result)
        diagnosis = diagnose(result, self.model, self.best_accept)
        accept = accept_length(result) if result.config.speculative else None
        if accept is not None:
            self.best_accept = max(accept, self.best_accept or accept)
        if diagnosis.startswith("broken_speculation"):
            self.broken_trials += 1
        # Loud once the draft has failed on two trees and worked on none: one tree can simply not suit it.
        if self.broken_trials >= 2 and not self.broken_warned and diagnosis.startswith("broken_speculation"):
            self.broken_warned = True
            log.error("!!! %s", diagnosis)
        if info.baseline and result.output_tok_per_s:
            self.baseline_tok_s = result.output_tok_per_s
        speedup = None
        if self.baseline_tok_s and result.output_tok_per_s and not info.baseline:
            speedup = result.output_tok_per_s / self.baseline_tok_s
        record = TrialRecord(
            number=trial.number,
            result=result,
            objective=objective,
            speedup_vs_baseline=speedup,
            diagnosis=diagnosis,
            baseline=info.baseline,
            extra_tags=tuple([("pruned_at_stage", str(info.pruned_at))] if info.pruned_at is not None else [])
            + tuple(("memory_model_correction", c.what) for c in corrections[:1])
            + _confirm_tag(trial),
        )
        record = self.lossless.review(record)
        self.tracker.log_trial(record)
        self.outcome.records.append(record)
        self.on_record(record)
        log.info("trial %d %s: %s", trial.number, result.status.value, result.config.label())


def _confirm_tag(trial: optuna.Trial) -> tuple[tuple[str, str], ...]:
    of = trial.user_attrs.get(TrialAttr.CONFIRM_OF)
    return ((TrialAttr.CONFIRM_OF, str(of)),) if of is not None else ()


def _bl(attrs: dict[str, Any]) -> dict[str, Any]:
    return {TrialAttr.BASELINE: True} if attrs.get(TrialAttr.BASELINE) else {}


def _finished_elsewhere(study: optuna.Study, trial: optuna.Trial) -> bool:
    return study._storage.get_trial(trial._trial_id).state.is_finished()


def _status_of(t: optuna.trial.FrozenTrial) -> TrialStatus | None:
    try:
        return TrialStatus(t.user_attrs.get(TrialAttr.STATUS, ""))
    except ValueError:
        return None


def config_from_params(params: dict[str, Any]) -> ServerConfig | None:
    """The configuration a trial's Optuna params stand for (top-k 1 trials have no draft-token param)."""
    try:
        steps = params.get("speculative_num_steps")
        return make_config(
            params["mem_fraction_static"],
            params["cuda_graph_max_bs"],
            params["max_running_requests"],
            int(steps) if steps is not None else None,
            int(params["speculative_eagle_topk"]) if steps is not None else None,
            params.get("speculative_num_draft_tokens"),
        )
    except (KeyError, TypeError, ValueError, SpecError):
        return None


def _replayed_result(
    t: optuna.trial.FrozenTrial, config: ServerConfig, status: TrialStatus, memory: dict[str, Any]
) -> TrialResult:
    """The part of a finished trial's result the memory model learns from, read back from the study."""
    stage = t.user_attrs.get(TrialAttr.FAILURE_STAGE)
    failure = None
    if stage:
        kind = FailureKind.OOM if status is TrialStatus.OOM else FailureKind.CRASH
        failure = Failure(FailureStage(stage), kind, "from the study's record")
    fraction = t.user_attrs.get(TrialAttr.RESOLVED_MEM_FRACTION, config.mem_fraction_static)
    return TrialResult(
        config=config,
        status=status,
        node_id=str(t.user_attrs.get(TrialAttr.NODE_ID, "")),
        command=(),
        failure=failure,
        memory={k: float(v) for k, v in memory.items() if isinstance(v, int | float)},
        resolved_args={"mem_fraction_static": float(fraction)},
    )
