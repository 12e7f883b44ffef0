"""The ask/tell loop: Optuna proposes, an executor runs one trial per node, the driver tells and records.

Only this driver touches the Optuna storage and MLflow. Each benchmark stage is reported as an
intermediate value, so the pruner can stop a configuration that is already clearly worse. A finished
trial goes through one funnel: `settle` decides what it means, the study is told, then the observers
(`driver.loop.observers`) each do their one job. The loop's parts: `driver.loop.state`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial

from orchestrator import dashboard_metrics
from orchestrator.driver.dispatch import placement, quarantine
from orchestrator.driver.dispatch.executor import Executor, Handle
from orchestrator.driver.loop import observers as obs
from orchestrator.driver.loop import without_launch
from orchestrator.driver.loop.lossless import LosslessCheck
from orchestrator.driver.loop.no_result import NoResult
from orchestrator.driver.loop.node_memory import memory_model_for
from orchestrator.driver.loop.outcome import Progress, StopReason, SweepOutcome
from orchestrator.driver.loop.pruning import StageReports
from orchestrator.driver.loop.resume import Resume
from orchestrator.driver.loop.settle import Settled, settle
from orchestrator.driver.loop.state import InFlight, log, quietly
from orchestrator.driver.loop.stop_rules import StopRules
from orchestrator.driver.loop.twins import Twins
from orchestrator.driver.memory.learned import MemoryModel
from orchestrator.driver.memory.prior_model import from_prior
from orchestrator.driver.proposal.policy import Action, ProposalPolicy
from orchestrator.driver.search.space import params_for, suggest_config
from orchestrator.driver.store.journal import Journal
from orchestrator.driver.store.study import (
    close_and_requeue,
    close_unlaunched,
    finished_elsewhere,
    launched_count,
    tell,
)
from orchestrator.driver.store.study_lock import DriverLease
from orchestrator.driver.store.tracking import Tracker
from orchestrator.driver.store.trial_attrs import TrialAttr
from orchestrator.errors import TrialError, TrialLost
from orchestrator.records import ServerConfig, TrialRecord, TrialResult, TrialStatus
from orchestrator.spec import engine_catalog
from orchestrator.spec.sweep_spec import SweepSpec
from orchestrator.trial_events import TrialRequest, failure_stage
from orchestrator.trial_log import left_in


def _ray_executor() -> Executor:
    from orchestrator.driver.dispatch.cluster import RayExecutor

    return RayExecutor()


class Sweep(StopRules, Resume, StageReports, NoResult):
    """The loop: its wiring (the observers, the memory model, the proposal policy) and the steps of one
    trial, from the ask to the observers; its stop rules, deadline and confirmation reserve, first steps
    and stage reports are the parts it is made of (`driver.loop.state`)."""

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
        executor: Executor | None = None,
        clock: Callable[[], float] | None = None,
        proposals: bool = True,
    ) -> None:
        self.spec = spec
        self.lease = lease
        self.study = study
        self.tracker = tracker
        self.n_trials = n_trials
        self.workdir = workdir
        self.sim_profile = sim_profile
        self.on_progress = on_progress
        self.executor = executor if executor is not None else _ray_executor()
        self.outcome = SweepOutcome()
        # The time budget's clock: the wall clock, or an executor's own (the search benchmark's node time).
        self.clock = clock or time.monotonic
        # No new launch after this moment; running trials finish (a later --resume goes on).
        self.deadline = self.clock() + time_budget_s if time_budget_s else None
        self.time_budget_s = time_budget_s
        self._inflight: dict[Handle, InFlight] = {}
        self._open: dict[int, optuna.Trial] = {}  # asked and not yet told, launched or not
        self._by_number: dict[int, Handle] = {}
        self._node_of: dict[Handle, str] = {}
        self.nodes = quarantine.NodeHealth()
        self.skipped = 0
        self.repeats = 0
        self.lost_in_a_row = 0
        self.server_of = engine_catalog.server_of(spec.engine)  # `measured`'s key (`state.SweepState`)
        self.measured: obs.Measured = {}
        self.twins = Twins(self.server_of)  # draws of a server running on another node wait for it
        self._space: frozenset[ServerConfig] | None = None  # the finite space's configurations, once listed
        self.lossless = LosslessCheck(spec, tracker)
        self.journal = Journal(workdir / "records")
        self.journal_complete = True  # every earlier launch's record was found on --resume
        # The learned memory model, plus the bounds only failures teach (KV pressure per speculative tree,
        # the fraction above which the draft no longer fits): benchmarks/ showed a third fewer OOM launches.
        # Under both, the analytic prior from the models' config.json (driver.memory.prior_model): what
        # cannot fit is known before the first launch.
        model, warnings = memory_model_for(spec, sim_profile)
        for warning in warnings:
            log.warning("%s", warning)
        self._learning = obs.MemoryLearning(model)
        self.diagnosis = obs.Diagnosis(model, spec.search)
        self.speedup = obs.Speedup()
        # The proposal policy in front of Optuna (driver.proposal.policy); off: TPE alone proposes.
        self.proposals = ProposalPolicy(spec) if proposals else None
        self.confirming = False
        progress = self.outcome.progress
        self._best = obs.BestSoFar(progress, self.outcome.records, self.lossless.lossy)
        self.observers: list[obs.Observer] = [
            obs.ProgressCounts(progress),
            obs.NodeMetrics(self.nodes, progress),
            obs.MeasuredSet(self.measured, self.server_of),
            self._learning,
            self.diagnosis,
            self.speedup,
            obs.build_record,
            obs.LosslessReview(self.lossless),
            obs.JournalWrite(self.journal),
            obs.TrackerLog(tracker),
            obs.Collect(self.outcome.records, on_record),
            self._best,
        ]

    @property
    def memory_model(self) -> MemoryModel:
        """What the sweep predicts memory with and learns into (a benchmark may swap in another)."""
        return self._learning.model

    @memory_model.setter
    def memory_model(self, model: MemoryModel) -> None:
        self._learning.model = model
        self.diagnosis.model = model

    @property
    def baseline_tok_s(self) -> float | None:
        return self.speedup.baseline_tok_s

    def running_nodes(self) -> list[str]:
        """The nodes a trial of this sweep runs on now."""
        return list(self._node_of.values())

    # -- the loop ------------------------------------------------------------------------------------

    def run(self) -> SweepOutcome:
        p = self.outcome.progress
        self.executor.open()
        try:
            while True:
                self._fill()
                if not self._inflight:
                    break
                done, events = self.executor.wait(list(self._inflight), timeout_s=1.0)
                self._handle_events(events)
                for handle in done:
                    if handle in self._inflight:
                        p.phases.pop(self._inflight[handle].trial.number, None)
                        self._finish(handle)
                        self.executor.node_health(self.nodes.board())
                p.running = len(self._inflight)
                self.on_progress(p)
        finally:
            # Every trial this driver asked for and has not told: in flight, or caught between the ask
            # and the launch, or between its result and the tell, when the signal came. The study and the
            # records first: the same Ctrl-C may have taken Ray down already, and a cancel that raises
            # must not leave a trial RUNNING (the next driver would find it stale and never show it).
            for trial, _ in self.twins.drain():  # never launched: closed, not re-queued (`twins`)
                self._leave_open(trial, closed=close_unlaunched(self.study, trial))
            for trial in list(self._open.values()):
                self._close_interrupted(trial)
            for handle in list(self._inflight):
                quietly(self.executor.cancel, handle)
            quietly(self.executor.close)
        return self.outcome

    def _close_interrupted(self, trial: optuna.Trial) -> None:
        """An interrupted trial costs no budget and is queued again; one that was launched is shown like
        any other (the console's line and table, MLflow, the journal) as INTERRUPTED."""
        handle = self._by_number.get(trial.number)
        info = self._inflight.get(handle) if handle is not None else None
        if info is None:  # not launched: there is nothing to show
            self._leave_open(trial, closed=close_and_requeue(self.study, trial))
            return
        phase = self.outcome.progress.phases.get(trial.number)
        where = phase.describe() if phase is not None else "its start"
        result = without_launch.interrupted(
            info.config,
            failure_stage(phase.phase if phase is not None else None),
            f"the driver stopped during {where}: not counted, its configuration is queued again",
            time.monotonic() - info.started,
            node_id=self._node_of.get(handle, "") if handle is not None else "",
            left=left_in(self.trial_dir(trial.number)),
        )
        settled = settle(result, self.spec, None)
        closed = close_and_requeue(self.study, trial, settled.attrs)
        self._leave_open(trial, closed=closed)
        if closed:
            self._observe(trial, info.baseline, settled)

    def _leave_open(self, trial: optuna.Trial, closed: bool = True) -> None:
        """The one transition out of the open set (asked, not yet told): told, answered from the record,
        or closed by an interrupt. A trial the study did close is no longer this driver's to keep alive
        (the lease's heartbeat stops naming it)."""
        self._open.pop(trial.number, None)
        if closed and self.lease is not None:
            self.lease.untrack(trial._trial_id)

    def _fill(self) -> None:
        slots = max(self.executor.trial_slots(), 1)
        while (
            len(self._inflight) < slots and launched_count(self.study) + len(self._inflight) < self.n_trials
        ):
            if self._search_must_stop():
                return
            node_id = placement.pick_node(
                self.executor.alive_nodes(),
                busy=set(self._node_of.values()),
                quarantined=set(self.nodes.quarantined_nodes),
                gpus=self.spec.node.gpus,
            )
            if node_id is None:
                if not self._inflight and not self.executor.alive_nodes():
                    raise RuntimeError("no alive node with a trial slot is left")
                if not self._inflight and self.nodes.quarantined_nodes:
                    raise RuntimeError("every node failed GPU hygiene: " + "; ".join(self.nodes.report()))
                return
            released = self.twins.next_released()  # drawn while a twin ran, which measured nothing
            if released is not None:
                trial, config = released
            else:
                if not self._propose():
                    return
                if self._space_exhausted():
                    self._stop(StopReason.SPACE_EXHAUSTED)
                    return
                if self._only_running_left():
                    return
                trial = self.study.ask()
                self._open[trial.number] = trial
                if self.lease is not None:
                    self.lease.track(trial._trial_id)
                config = suggest_config(trial, self.spec.search)
            baseline = bool(trial.user_attrs.get(TrialAttr.BASELINE))
            # A confirmation launch is launched whatever the record or the memory model says (and, like a
            # re-queued trial, is not re-queued again if its node dies).
            requeued = TrialAttr.REQUEUED_FROM in trial.user_attrs or TrialAttr.CONFIRM_OF in trial.user_attrs
            seen = self.measured.get(self.server_of(config))
            if seen is not None and not requeued:
                self._repeat(trial, config, seen)
                continue
            twin = self.twins.running(config, ((i.trial.number, i.config) for i in self._inflight.values()))
            if twin is not None and not requeued:
                trial.set_user_attr(TrialAttr.WAITS_FOR, twin)
                self.twins.wait(trial, config)
                log.info("trial %d waits for trial %d, the same server on another node", trial.number, twin)
                continue
            prediction = self.memory_model.predict(config)
            known_good = bool(trial.user_attrs.get(TrialAttr.KNOWN_GOOD))
            if prediction.skip and not requeued and (not known_good or from_prior(prediction)):
                self._skip(trial, config, prediction, baseline)
                continue
            request = TrialRequest(
                spec=self.spec,
                config=config,
                number=trial.number,
                workdir=str(self.trial_dir(trial.number)),
                sim_profile=self.sim_profile,
            )
            handle = self.executor.submit(request, node_id)
            self._node_of[handle] = node_id
            dashboard_metrics.record_running(node_id, True)
            self._inflight[handle] = InFlight(trial, config, time.monotonic(), baseline, requeued)
            self._by_number[trial.number] = handle
            log.info("trial %d started: %s", trial.number, config.label())

    # -- the proposal policy (driver.proposal) ---------------------------------------------------

    def _propose(self) -> bool:
        """Queue the policy's proposal for the next ask (False: the answer is known, launch nothing more).
        Queued trials (the baseline, known-good, re-queued ones) and the confirmation go first."""
        if self.proposals is None or self.confirming:
            return True
        if self.study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,)):
            return True
        pending = [info.config for info in self._inflight.values()]
        decision = self.proposals.decide(
            self.outcome.records, pending, self.memory_model, self.lossless.lossy
        )
        if decision.action is Action.STOP:
            if not self._inflight:
                self._answer_known(decision.why)
            return False
        if decision.action is Action.PROPOSE and decision.config is not None:
            self.study.enqueue_trial(params_for(decision.config, self.spec.search), user_attrs=decision.attrs)
            log.info("proposal: %s", decision.why)
        return True

    # -- events and results ---------------------------------------------------------------------------

    def _finish(self, handle: Handle) -> None:
        info = self._inflight.pop(handle)
        self._by_number.pop(info.trial.number, None)
        dashboard_metrics.record_running(self._node_of.pop(handle, ""), False)
        try:
            result = self.executor.result(handle)
        except TrialLost as err:  # a draw waiting for this server is its retry, not a re-queued copy
            result = self._lost(info, err, requeue_it=not self.twins.waiting_on(info.config))
        except TrialError as err:
            result = self._internal_error(info, err)
        self.journal.servers.forget(info.trial.number)  # its server was stopped with it
        self.lost_in_a_row = self.lost_in_a_row + 1 if result.status is TrialStatus.LOST else 0
        self._tell_and_record(info, result)
        seen = self.measured.get(self.server_of(info.config))  # set by `MeasuredSet` if it measured
        for trial, config, twin in self.twins.settled(info.config, seen):
            self._repeat(trial, config, twin)

    def _tell_and_record(self, info: InFlight, result: TrialResult) -> None:
        """settle -> tell -> observers."""
        trial = info.trial
        settled = settle(result, self.spec, info.pruned_at)
        if finished_elsewhere(self.study, trial):
            # Another process closed it (a second driver that should have been refused, by hand): the
            # result is still recorded in MLflow by the observers, but the study cannot take it any more.
            log.error("trial %d was closed by another process; its result goes to MLflow only", trial.number)
        else:
            for key, value in settled.attrs.items():
                trial.set_user_attr(key, value)
            tell(self.study, trial, settled.tell)
        self._leave_open(trial)
        self._observe(trial, info.baseline, settled)

    def _observe(self, trial: optuna.Trial | FrozenTrial, baseline: bool, settled: Settled) -> None:
        of = trial.user_attrs.get(TrialAttr.CONFIRM_OF)
        done = obs.Finished(trial.number, settled, baseline, confirm_of=int(of) if of is not None else None)
        for observer in self.observers:
            observer(done)
        log.info("trial %d %s: %s", trial.number, settled.result.status.value, settled.result.config.label())
