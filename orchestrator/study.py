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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
import ray
from optuna.trial import TrialState

from orchestrator import cluster, health
from orchestrator.diagnosis import diagnose
from orchestrator.memory_model import MemoryModel, Prediction, kv_heads_of
from orchestrator.records import (
    Failure,
    FailureKind,
    FailureStage,
    ServerConfig,
    StageMetrics,
    TrialResult,
    TrialStatus,
)
from orchestrator.space import BASELINE_ATTR, baseline_config, config_params, suggest_config
from orchestrator.spec import SweepSpec
from orchestrator.tracking import Tracker, TrialRecord
from orchestrator.trial import TrialRequest

log = logging.getLogger(__name__)
OOM_CONSTRAINT = "oom"
REQUEUED_ATTR = "requeued_from"
_FREE_STATUSES = frozenset({TrialStatus.PREDICTED_OOM.value, TrialStatus.LOST.value})
HISTORY_ATTR = "warm_start_from"  # a trial of an earlier study, added by --warm-start
REPEAT_ATTR = "repeat_of"  # answered from an earlier trial's record, not launched
KNOWN_GOOD_ATTR = "known_good"  # enqueued by the user: launched even when the model predicts an OOM


@dataclass
class Progress:
    done: int = 0
    running: int = 0
    pruned_oom: int = 0
    failed: int = 0
    best_tok_s: float | None = None
    best_number: int | None = None


@dataclass
class _InFlight:
    trial: optuna.Trial
    config: ServerConfig
    started: float
    baseline: bool
    requeued: bool
    pruned_at: int | None = None


@dataclass
class SweepOutcome:
    records: list[TrialRecord] = field(default_factory=list)
    progress: Progress = field(default_factory=Progress)


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


def open_study(spec: SweepSpec, name: str, storage: str, resume: bool) -> optuna.Study:
    # group=True: the speculative values exist only together and draft tokens only for top-k > 1, so the
    # space is conditional; grouped multivariate TPE models each sub-space jointly (benchmarks/: it
    # reaches 98 % of the best in more runs on every profile than the ungrouped sampler).
    sampler = optuna.samplers.TPESampler(
        seed=spec.sampler_seed, multivariate=True, group=True, constant_liar=True, n_startup_trials=5
    )
    # Cut only what is clearly worse (Optuna's percentile is what is *kept*: 75 prunes the bottom
    # quarter), and only after two stages: a configuration built for high concurrency may be ordinary
    # at low concurrency.
    pruner = optuna.pruners.PercentilePruner(75.0, n_startup_trials=4, n_warmup_steps=1)
    if not resume:
        try:
            optuna.delete_study(study_name=name, storage=storage)
        except KeyError:
            pass
    study = optuna.create_study(
        study_name=name,
        storage=storage,
        direction="maximize",
        sampler=sampler,
        pruner=pruner,
        load_if_exists=True,
    )
    study.set_user_attr("spec_name", spec.name)
    return study


def tell_outcome(
    study: optuna.Study, trial: optuna.Trial, status: TrialStatus, objective: float | None, pruned: bool
) -> None:
    """Tell Optuna what happened so that the sampler learns from it.

    Infeasible outcomes (OOM at start-up or under load, predicted OOM) are PRUNED with the `oom`
    constraint violated: TPE reads constraints of PRUNED trials and ignores FAIL ones, which is why other
    tuners retry OOMs. A crash, a timeout or a lost node is FAIL: it says nothing about memory.
    """
    if status.infeasible:
        trial.set_constraint(OOM_CONSTRAINT, 1.0)
        study.tell(trial, state=TrialState.PRUNED)
    elif status is TrialStatus.OK:
        trial.set_constraint(OOM_CONSTRAINT, 0.0)
        if pruned:
            study.tell(trial, state=TrialState.PRUNED)
        else:
            study.tell(trial, objective if objective is not None else 0.0)
    else:
        study.tell(trial, state=TrialState.FAIL)


class Sweep:
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
    ) -> None:
        self.spec = spec
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
        self.model = MemoryModel(tp=spec.node.gpus, kv_heads=kv_heads_of(spec.model.path))
        self.nodes = health.NodeHealth()
        self._node_of: dict[Any, str] = {}
        self.skipped = 0
        self.repeats = 0
        self._measured: dict[ServerConfig, tuple[int, TrialStatus, float | None]] = {}
        self.broken_warned = False

    # -- study bookkeeping ------------------------------------------------------------------------

    def prepare(self, resume: bool) -> None:
        """Close trials a dead driver left RUNNING (re-queueing their configurations), and on a new
        study enqueue the baseline and the known-good configurations first."""
        stale = [t for t in self.study.get_trials(deepcopy=False) if t.state == TrialState.RUNNING]
        for t in stale:
            # Mark it before closing: a finished trial can no longer take attributes.
            self.study._storage.set_trial_user_attr(t._trial_id, "closed", "stale: its driver died")
            self.study.tell(t.number, state=TrialState.FAIL)
            self.study.enqueue_trial(t.params, user_attrs={REQUEUED_ATTR: t.number, **_bl(t.user_attrs)})
            log.warning("closed stale trial %d and re-queued its configuration", t.number)
        if resume and self._finished_count() > 0:
            self._restore_progress()
            return
        known = [k.to_config() for k in self.spec.known_good]
        if self.spec.budget.baseline:
            self.study.enqueue_trial(
                baseline_config(self.spec.search, known[0] if known else None),
                user_attrs={BASELINE_ATTR: True},
                skip_if_exists=True,
            )
        for config in known:
            self.study.enqueue_trial(
                config_params(config), user_attrs={KNOWN_GOOD_ATTR: True}, skip_if_exists=True
            )

    def _finished_count(self) -> int:
        """Trials that count against the budget: launched and finished. A predicted-OOM skip costs no GPU
        time and a trial lost with its node says nothing about its configuration (it is re-queued), so
        neither uses up a launch."""
        return sum(
            1
            for t in self.study.get_trials(deepcopy=False)
            if t.state.is_finished()
            and "closed" not in t.user_attrs
            and HISTORY_ATTR not in t.user_attrs
            and REPEAT_ATTR not in t.user_attrs
            and t.user_attrs.get("status") not in _FREE_STATUSES
        )

    def _restore_progress(self) -> None:
        p = self.outcome.progress
        for t in self.study.get_trials(deepcopy=False):
            if not t.state.is_finished() or "closed" in t.user_attrs or HISTORY_ATTR in t.user_attrs:
                continue
            p.done += 1
            if t.user_attrs.get("status") in {s.value for s in TrialStatus if s.infeasible}:
                p.pruned_oom += 1
            tok = t.user_attrs.get("output_tok_per_s")
            if t.user_attrs.get(BASELINE_ATTR) and tok:
                self.baseline_tok_s = float(tok)
            if (
                t.state == TrialState.COMPLETE
                and t.value is not None
                and (p.best_tok_s is None or t.value > p.best_tok_s)
            ):
                p.best_tok_s, p.best_number = t.value, t.number
            self._remember_measured(t)

    def _remember_measured(self, t: optuna.trial.FrozenTrial) -> None:
        """A resumed sweep knows what the earlier run measured, so TPE's repeats of it are answered from
        the record instead of launched again."""
        status = t.user_attrs.get("status")
        if status not in {s.value for s in TrialStatus} or REPEAT_ATTR in t.user_attrs:
            return
        measured = TrialStatus(status)
        if (measured is TrialStatus.OK and t.state == TrialState.COMPLETE) or measured.infeasible:
            config = suggest_config(t, self.spec.search)  # a finished trial answers with its own params
            self._measured.setdefault(config, (t.number, measured, t.value))

    # -- the loop ------------------------------------------------------------------------------------

    def run(self) -> SweepOutcome:
        broker = cluster.StageBroker.remote()  # type: ignore[attr-defined]
        try:
            while True:
                self._fill(broker)
                if not self._inflight:
                    break
                ready, _ = ray.wait(list(self._inflight), num_returns=1, timeout=0.2)
                self._handle_stage_reports(broker)
                for ref in ready:
                    self._finish(ref)
                self.outcome.progress.running = len(self._inflight)
                self.on_progress(self.outcome.progress)
        finally:
            for ref, info in list(self._inflight.items()):
                ray.cancel(ref, force=True)
                # Interrupted (Ctrl-C): the trial says nothing about its configuration. Closed like a
                # stale one, so it costs no budget and --resume runs the configuration again.
                info.trial.set_user_attr("closed", "interrupted")
                self.study.tell(info.trial, state=TrialState.FAIL)
                self.study.enqueue_trial(
                    info.trial.params,
                    user_attrs={REQUEUED_ATTR: info.trial.number, **_bl(info.trial.user_attrs)},
                )
            ray.kill(broker)
        return self.outcome

    def _fill(self, broker: Any) -> None:
        slots = max(cluster.trial_slots(), 1)
        while len(self._inflight) < slots and self._finished_count() + len(self._inflight) < self.n_trials:
            if self.deadline is not None and time.monotonic() > self.deadline:
                return
            if self.repeats >= 20 * self.n_trials:
                log.warning("stopping: the sampler only proposes configurations already measured")
                return
            if self.skipped >= 5 * self.n_trials:
                log.warning("stopping: the memory model rules out almost every proposal; widen the space")
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
            config = suggest_config(trial, self.spec.search)
            baseline = bool(trial.user_attrs.get(BASELINE_ATTR))
            requeued = REQUEUED_ATTR in trial.user_attrs
            seen = self._measured.get(config)
            if seen is not None and not requeued:
                self._repeat(trial, seen)
                continue
            prediction = self.model.predict(config)
            if prediction.skip and not requeued and not trial.user_attrs.get(KNOWN_GOOD_ATTR):
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

    def _repeat(self, trial: optuna.Trial, seen: tuple[int, TrialStatus, float | None]) -> None:
        """TPE proposes a configuration it has already measured once it settles: answer from the record
        instead of spending another launch (the study still learns the value)."""
        number, status, objective = seen
        self.repeats += 1
        trial.set_user_attr(REPEAT_ATTR, number)
        trial.set_user_attr("status", status.value)
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
        )
        info = _InFlight(trial, config, time.monotonic(), baseline, requeued=True)
        self._tell_and_record(info, result)

    def _handle_stage_reports(self, broker: Any) -> None:
        for number, step, metrics in ray.get(broker.take_reports.remote()):
            ref = self._by_number.get(number)
            info = self._inflight.get(ref) if ref is not None else None
            if info is None:
                continue
            value = self._intermediate(info, step, metrics)
            info.trial.report(value, step)
            last = step >= len(self.spec.workload.concurrency) - 1
            # After the last stage there is nothing left to save: a finished trial is never pruned.
            keep_going = info.baseline or last or not info.trial.should_prune()
            if not keep_going:
                info.pruned_at = step
            broker.decide.remote(number, step, keep_going)

    def _intermediate(self, info: _InFlight, step: int, metrics: StageMetrics) -> float:
        # The best tok/s so far: monotonic in the step, as the percentile pruner expects.
        best = info.trial.user_attrs.get("_best_so_far", 0.0)
        value = max(float(best), metrics.output_tok_per_s)
        info.trial.set_user_attr("_best_so_far", value)
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
                params, user_attrs={REQUEUED_ATTR: info.trial.number, BASELINE_ATTR: info.baseline}
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
        attrs: dict[str, Any] = {
            "status": result.status.value,
            "config": result.config.label(),
            "node_id": result.node_id,
            "output_tok_per_s": result.output_tok_per_s,
        }
        if result.failure is not None:
            attrs["failure"] = (
                f"{result.failure.stage.value}/{result.failure.kind.value}: {result.failure.message}"
            )
        for key, value in attrs.items():
            trial.set_user_attr(key, value)
        tell_outcome(self.study, trial, result.status, objective, pruned=info.pruned_at is not None)
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
        diagnosis = diagnose(result, self.model)
        if diagnosis.startswith("broken_speculation") and not self.broken_warned:
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
            + tuple(("memory_model_correction", c.what) for c in corrections[:1]),
        )
        self.tracker.log_trial(record)
        self.outcome.records.append(record)
        self.on_record(record)
        log.info("trial %d %s: %s", trial.number, result.status.value, result.config.label())


def _bl(attrs: dict[str, Any]) -> dict[str, Any]:
    return {BASELINE_ATTR: True} if attrs.get(BASELINE_ATTR) else {}
