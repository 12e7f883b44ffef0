"""The ask/tell loop: Optuna proposes, an executor runs one trial per node, the driver tells and records.

Only this driver touches the Optuna storage and MLflow. Each benchmark stage is reported as an
intermediate value, so the pruner can stop a configuration that is already clearly worse. A finished
trial goes through one funnel: `settle` decides what it means, the study is told, then the observers
(`driver.observers`) each do their one job.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial

from orchestrator import dashboard_metrics
from orchestrator.config.codec import config_from_optuna, optuna_params
from orchestrator.driver.answer import confirm
from orchestrator.driver.dispatch import placement, quarantine
from orchestrator.driver.dispatch.executor import Executor, Handle
from orchestrator.driver.loop import observers as obs
from orchestrator.driver.loop import without_launch
from orchestrator.driver.loop.lossless import LosslessCheck
from orchestrator.driver.loop.outcome import Progress, StopReason, SweepOutcome
from orchestrator.driver.loop.settle import Settled, settle
from orchestrator.driver.memory.build import memory_model_for
from orchestrator.driver.memory.learned import MemoryModel, Prediction
from orchestrator.driver.memory.prior_model import from_prior
from orchestrator.driver.proposal.policy import Action, ProposalPolicy
from orchestrator.driver.search.space import space_configs, suggest_config
from orchestrator.driver.store.journal import Journal
from orchestrator.driver.store.restore import enqueue_first, restore
from orchestrator.driver.store.study import (
    close_and_requeue,
    finished_elsewhere,
    launched_count,
    requeue,
    tell,
    tell_repeat,
)
from orchestrator.driver.store.study_lock import DriverLease, DriverStamp, close_dead_drivers_trials
from orchestrator.driver.store.tracking import Tracker
from orchestrator.driver.store.trial_attrs import TrialAttr
from orchestrator.errors import TrialError, TrialLost
from orchestrator.records import FailureStage, ServerConfig, TrialRecord, TrialResult, TrialStatus
from orchestrator.spec.sweep_spec import SweepSpec
from orchestrator.trial_events import PhaseEvent, TrialEvent, TrialRequest, failure_stage

log = logging.getLogger(__name__)
# Lost launches cost no budget, so they need a limit of their own: this many in a row stop the sweep.
LOST_IN_A_ROW = 5


@dataclass
class _InFlight:
    trial: optuna.Trial
    config: ServerConfig
    started: float
    baseline: bool
    requeued: bool
    pruned_at: int | None = None


def _ray_executor() -> Executor:
    from orchestrator.driver.dispatch.cluster import RayExecutor

    return RayExecutor()


class Sweep:
    confirm_reserve = 0  # launches kept back for confirmation (reserve_for_confirmation)
    # The search ended early so that the reserved confirmation launches fit in the time budget.
    stopped_to_confirm = False
    confirming = False

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
        self._inflight: dict[Handle, _InFlight] = {}
        self._open: dict[int, optuna.Trial] = {}  # asked and not yet told, launched or not
        self._by_number: dict[int, Handle] = {}
        self._node_of: dict[Handle, str] = {}
        self.nodes = quarantine.NodeHealth()
        self.skipped = 0
        self.repeats = 0
        self.lost_in_a_row = 0
        self.measured: obs.Measured = {}
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
            obs.MeasuredSet(self.measured),
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

    # -- study bookkeeping ------------------------------------------------------------------------

    def prepare(self, resume: bool) -> None:
        """Close trials a dead driver left RUNNING (re-queueing their configurations); then, on --resume,
        rebuild what the study taught (also when only the free baseline finished), or queue the first."""
        stale: dict[int, tuple[FrozenTrial, Settled]] = {}

        def record_stale(t: FrozenTrial, driver: DriverStamp | None) -> dict[str, Any]:
            settled = self._settle_stale(t, driver)
            if settled is None:
                return {}
            stale[t.number] = (t, settled)
            return settled.attrs

        me = self.lease.stamp.driver_id if self.lease else None
        close_dead_drivers_trials(self.study, me=me, attrs_of=record_stale)
        # No live driver holds the study now (the call above refuses otherwise): a recorded server still
        # running was left by a dead one, and would hold the GPUs of the trials to come.
        self.journal.servers.stop_stale()
        if resume and any(t.state.is_finished() for t in self.study.get_trials(deepcopy=False)):
            restored = restore(self.study)
            self.outcome.progress.absorb(restored.progress)
            self.speedup.baseline_tok_s = restored.baseline_tok_s
            for config, seen in restored.measured.items():
                self.measured.setdefault(config, seen)
            for number, result in restored.memory:
                self.memory_model.observe(number, result)
            # Every earlier launch joins the ranking, the confirmation and the lossless check.
            earlier = self.journal.read(restored.numbers)
            self.journal_complete = len(earlier) == len(restored.numbers)
            self.outcome.records.extend(earlier)
            self.lossless.restore(earlier)
            self._best.refresh()
        else:
            enqueue_first(self.study, self.spec, self.memory_model)
        # A dead driver's launches, shown now as interrupted (the console's line, MLflow, the journal).
        for t, settled in stale.values():
            self._observe(t, bool(t.user_attrs.get(TrialAttr.BASELINE)), settled)

    def _settle_stale(self, t: FrozenTrial, driver: DriverStamp | None) -> Settled | None:
        """A trial left RUNNING by a driver that died (kill -9, a machine gone): interrupted, not counted,
        queued again (None for a trial asked with no configuration yet: it was never launched)."""
        config = config_from_optuna(t.params)
        if config is None:
            return None
        whose = f"its driver ({driver.describe()})" if driver is not None else "its driver"
        # Its phase died with the driver; the stages it reported are in the study.
        reported = len(t.intermediate_values)
        stage = FailureStage.UNDER_LOAD if reported else FailureStage.LAUNCH
        when = f"after {reported} benchmark stage(s)" if reported else "before any benchmark stage ended"
        why = f"{whose} stopped while it ran, {when}: not counted, its configuration is queued again"
        return settle(without_launch.interrupted(config, stage, why), self.spec, None)

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
            for trial in list(self._open.values()):
                self._close_interrupted(trial)
            for handle in list(self._inflight):
                self._quietly(self.executor.cancel, handle)
            self._quietly(self.executor.close)
        return self.outcome

    @staticmethod
    def _quietly(call: Callable[..., None], *args: Any) -> None:
        """Tear down what may be gone already; the exception on its way out (an interrupt) stays the one
        raised."""
        try:
            call(*args)
        except Exception as err:
            log.warning("while stopping: %s: %s", type(err).__name__, err)

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

    def _stop(self, reason: StopReason, message: str = "") -> None:
        if self.outcome.stop_reason is StopReason.BUDGET_DONE:
            self.outcome.stop_reason = reason
            if message:
                log.warning("%s", message)

    def _fill(self) -> None:
        slots = max(self.executor.trial_slots(), 1)
        while (
            len(self._inflight) < slots and launched_count(self.study) + len(self._inflight) < self.n_trials
        ):
            if self.deadline is not None and self.clock() >= self.deadline:
                self._stop(StopReason.TIME_BUDGET)
                return
            if self._confirmation_due():
                return
            if self.repeats >= 20 * self.n_trials:
                self._stop(StopReason.ONLY_REPEATS)
                return
            if self.skipped >= 5 * self.n_trials:
                self._stop(StopReason.ALL_SKIPPED)
                return
            if self.lost_in_a_row >= LOST_IN_A_ROW:
                self._stop(StopReason.ALL_LOST)
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
            if not self._propose():
                return
            if self._space_exhausted():
                self._stop(StopReason.SPACE_EXHAUSTED)
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
            seen = self.measured.get(config)
            if seen is not None and not requeued:
                self._repeat(trial, seen)
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
                workdir=str(self.workdir / "trials" / f"{trial.number:04d}"),
                sim_profile=self.sim_profile,
            )
            handle = self.executor.submit(request, node_id)
            self._node_of[handle] = node_id
            dashboard_metrics.record_running(node_id, True)
            self._inflight[handle] = _InFlight(trial, config, time.monotonic(), baseline, requeued)
            self._by_number[trial.number] = handle
            log.info("trial %d started: %s", trial.number, config.label())

    def _space_exhausted(self) -> bool:
        """Every configuration of a finite space is settled (measured, or ruled out before launch) and
        nothing is queued: an ask could only repeat one, answered from the record, and on a small space
        the sampler would be asked thousands of times before the repeat limit (each TPE ask reads every
        trial so far). A space with a continuous range is never exhausted."""
        if self._space is None:
            try:
                self._space = frozenset(space_configs(self.spec.search))
            except ValueError:  # a float range without a step: not enumerable
                self._space = frozenset()
        if not self._space or self.study.get_trials(
            deepcopy=False, states=(optuna.trial.TrialState.WAITING,)
        ):
            return False
        return self._space <= self.measured.keys()

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
            self.study.enqueue_trial(
                optuna_params(decision.config, self.spec.search), user_attrs=decision.attrs
            )
            log.info("proposal: %s", decision.why)
        return True

    def _answer_known(self, why: str) -> None:
        left = self.remaining()
        gpu_s = [r.result.wall_s for r in self.outcome.records if r.result.node_id and r.result.wall_s > 0]
        hours = left * (sum(gpu_s) / len(gpu_s)) * self.spec.node.gpus / 3600 if gpu_s else 0.0
        given = f"{left} of the budget's launches given back" + (
            f" (about {hours:.2f} GPU-hours)" if hours else ""
        )
        self.outcome.stop_detail = f"{why}; {given}"
        self._stop(StopReason.ANSWER_KNOWN)
        log.info("stopped early: %s", self.outcome.stop_detail)

    # -- confirmation (driver.answer.confirm) ---------------------------------------------------------

    def remaining(self) -> int:
        """Launches left in the budget."""
        return max(self.n_trials - launched_count(self.study), 0)

    def _confirmation_due(self) -> bool:
        """Whether the search must end now so that the reserved confirmation launches still fit in the
        time budget (estimated from the launches so far). Without it a sweep ended by its time budget
        answered with an unconfirmed single launch."""
        if self.deadline is None or self.confirming or self.confirm_reserve <= 0:
            return False
        slots = max(self.executor.trial_slots(), 1)
        need = confirm.time_to_confirm(self.outcome.records, self.confirm_reserve, slots)
        if need is None or self.clock() + need < self.deadline:
            return False
        self.stopped_to_confirm = True
        self._stop(
            StopReason.TIME_BUDGET,
            f"time budget: the search ends here so that the {self.confirm_reserve} confirmation launches "
            f"(about {need:.0f} s) still fit",
        )
        return True

    def reserve_for_confirmation(self) -> int:
        """Keep the budget's confirmation launches back from the search (call before ``run``); returns
        how many. ``n_trials`` then counts the search's launches only, until ``confirm_best``."""
        # On --resume only what is left of the budget can be split: an earlier invocation's launches
        # (its confirmation included) are spent.
        self.confirm_reserve = confirm.reserved_launches(self.spec.budget, self.remaining())
        self.n_trials -= self.confirm_reserve
        return self.confirm_reserve

    def confirm_best(self) -> SweepOutcome:
        """After the search: launch the top configurations again until each has ``confirm_repeats``
        launches, through the same loop (the confirmation bypasses the repeat-from-record rule). A sweep
        whose time budget ended its search left room for them (``_confirmation_due``), and one whose
        answer is known (the proposal policy's stop) has ended its search too; one that stopped early
        otherwise confirms nothing yet: its search is not over, and --resume confirms at its end."""
        reason = self.outcome.stop_reason
        if reason not in (StopReason.BUDGET_DONE, StopReason.ANSWER_KNOWN) and not (
            reason is StopReason.TIME_BUDGET and self.stopped_to_confirm
        ):
            return self.outcome
        self.confirming = True
        candidates = confirm.candidates(self.outcome.records, self.lossless.lossy)
        enqueued = confirm.enqueue(self.study, candidates, self.spec.budget, self.confirm_reserve)
        if not enqueued:
            return self.outcome
        # Exactly the enqueued launches: the loop asks the sampler for nothing new.
        self.n_trials = launched_count(self.study) + enqueued
        return self.run()

    # -- the three ways a trial ends without running ------------------------------------------------

    def _repeat(self, trial: optuna.Trial, seen: tuple[int, TrialStatus, float | None]) -> None:
        """TPE proposes a configuration it has already measured once it settles: answer from the record
        instead of spending another launch (the study still learns the value)."""
        self.repeats += 1
        tell_repeat(self.study, trial, *seen)
        self._leave_open(trial)
        log.info("trial %d repeats trial %d: answered from the record", trial.number, seen[0])

    def _skip(
        self, trial: optuna.Trial, config: ServerConfig, prediction: Prediction, baseline: bool
    ) -> None:
        """Spend no GPU time on what cannot fit: the study learns it as infeasible all the same."""
        self.skipped += 1
        info = _InFlight(trial, config, time.monotonic(), baseline, requeued=True)
        self._tell_and_record(info, without_launch.predicted_oom(config, prediction))

    def _lost(self, info: _InFlight, err: TrialLost) -> TrialResult:
        """The node or the worker died under the trial: not an OOM, and worth one more try elsewhere."""
        log.error("trial %d lost: %s", info.trial.number, err)
        if not info.requeued:
            requeue(self.study, info.trial, info.baseline)
        return without_launch.lost(info.config, err, time.monotonic() - info.started)

    def _internal_error(self, info: _InFlight, err: TrialError) -> TrialResult:
        """specsweep's own trial code raised: the same configuration would raise again, so the trial is
        FAILED and counted (never re-queued), and the traceback goes to the driver's log."""
        log.error(
            "trial %d: the trial code raised at %s (a bug in specsweep: please report it): %s\n%s",
            info.trial.number,
            err.stage.value,
            err.message,
            err.detail,
        )
        return without_launch.internal_error(info.config, err, time.monotonic() - info.started)

    # -- events and results ---------------------------------------------------------------------------

    def _handle_events(self, events: list[TrialEvent]) -> None:
        for event in events:
            handle = self._by_number.get(event.number)
            info = self._inflight.get(handle) if handle is not None else None
            if info is None:
                continue
            if isinstance(event, PhaseEvent):
                if event.server is not None:
                    self.journal.servers.record(event.number, event.server)
                self.outcome.progress.phases[event.number] = event
                continue
            step, trial = event.step, info.trial
            # The best tok/s so far: monotonic in the step, as the percentile pruner expects.
            value = max(
                float(trial.user_attrs.get(TrialAttr.BEST_SO_FAR, 0.0)), event.metrics.output_tok_per_s
            )
            trial.set_user_attr(TrialAttr.BEST_SO_FAR, value)
            trial.report(value, step)
            last = step >= len(self.spec.workload.concurrency) - 1
            # After the last stage there is nothing left to save: a finished trial is never pruned.
            # A confirmation launch is never pruned: its whole point is one more full measurement.
            confirming = TrialAttr.CONFIRM_OF in trial.user_attrs
            keep_going = info.baseline or last or confirming or not trial.should_prune()
            if not keep_going:
                info.pruned_at = step
            self.executor.decide(event.number, step, keep_going)

    def _finish(self, handle: Handle) -> None:
        info = self._inflight.pop(handle)
        self._by_number.pop(info.trial.number, None)
        dashboard_metrics.record_running(self._node_of.pop(handle, ""), False)
        try:
            result = self.executor.result(handle)
        except TrialLost as err:
            result = self._lost(info, err)
        except TrialError as err:
            result = self._internal_error(info, err)
        self.journal.servers.forget(info.trial.number)  # its server was stopped with it
        self.lost_in_a_row = self.lost_in_a_row + 1 if result.status is TrialStatus.LOST else 0
        self._tell_and_record(info, result)

    def _tell_and_record(self, info: _InFlight, result: TrialResult) -> None:
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
