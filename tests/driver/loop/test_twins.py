"""On several nodes, a draw of a server running on another node waits for that launch's record
(`driver.loop.twins`), made by the product's own `Sweep` on an in-process executor of two nodes.

The pair drawn is graph bs 32 and 64 under max running 8: one server by SGLang's rule (it captures graphs
up to max running), so measuring both measures one server twice at the cost of a node.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import cast

import optuna
from optuna.storages import InMemoryStorage
from optuna.trial import TrialState

from benchmarks.truth.oracle import Oracle
from orchestrator.driver.dispatch.executor import Handle, TrialError
from orchestrator.driver.dispatch.placement import TRIAL_SLOT
from orchestrator.driver.search.space import params_for, suggest_config
from orchestrator.driver.store.study import open_study
from orchestrator.driver.store.study_lock import close_dead_drivers_trials
from orchestrator.driver.store.trial_attrs import TrialAttr
from orchestrator.records import ServerConfig, TrialResult
from orchestrator.trial_events import TrialEvent
from tests.driver.loop import test_driver_decisions as decisions
from tests.driver.loop.test_driver_decisions import NODE, InProcessExecutor, _sweep, _trials_of

# The driver tests' oracle (the tight memory case, prior off) and its configurations.
oracle, configs = decisions.oracle, decisions.configs


class TwoNodeExecutor(InProcessExecutor):
    """Two nodes, one slot each; the oldest trial in flight ends first, so two trials are always in
    flight together while the study has two. `raise_for`: configurations whose trial code raises."""

    def __init__(self, oracle: Oracle, lose: dict[ServerConfig, int] | None = None) -> None:
        super().__init__(oracle, lose)
        self.raise_for: set[ServerConfig] = set()

    def trial_slots(self) -> int:
        return 2

    def alive_nodes(self) -> list[dict[str, object]]:  # type: ignore[override]
        return [
            {"NodeID": node, "Alive": True, "Resources": {TRIAL_SLOT: 1.0, "GPU": self.gpus}}
            for node in (NODE, "node-b")
        ]

    def wait(self, handles: Sequence[Handle], timeout_s: float) -> tuple[list[Handle], list[TrialEvent]]:
        return sorted(handles, key=lambda h: cast(int, h))[:1], []

    def result(self, handle: Handle) -> TrialResult:
        if self._requests[cast(int, handle)].config in self.raise_for:
            raise TrialError("ValueError: a bug in the trial code")
        return super().result(handle)


def _pair(configs: dict[str, ServerConfig]) -> tuple[ServerConfig, ServerConfig]:
    low = replace(configs["good"], cuda_graph_max_bs=32, max_running_requests=8)
    return low, replace(low, cuda_graph_max_bs=64)


def _queued(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    return study.get_trials(deepcopy=False, states=(TrialState.WAITING, TrialState.RUNNING))


def test_a_draw_of_a_server_running_on_another_node_waits_for_its_record(
    oracle: Oracle, configs: dict[str, ServerConfig]
) -> None:
    """Drawn one after the other, the twin was launched on the second node while the first ran, and the
    same server measured twice. It now waits for the first's record and is answered from it."""
    low, twin = _pair(configs)
    study = open_study(oracle.spec, "twins", InMemoryStorage(), resume=False)
    for config in (low, twin, configs["no_kv"]):
        study.enqueue_trial(params_for(config))
    executor = TwoNodeExecutor(oracle)
    sweep = _sweep(oracle.spec, study, executor, n_trials=2, proposals=False)
    sweep.prepare(resume=False)
    sweep.run()
    assert executor.launched(low) == 1 and executor.launched(twin) == 0
    # The slot the twin would have taken went to the next draw.
    assert executor.launched(configs["no_kv"]) == 1
    first, again = _trials_of(study, low)[0], _trials_of(study, twin)[0]
    assert again.user_attrs[TrialAttr.REPEAT_OF] == first.number
    assert again.user_attrs[TrialAttr.WAITS_FOR] == first.number
    assert again.state is TrialState.COMPLETE and again.value == first.value
    assert not _queued(study)


def test_the_draw_waiting_for_a_lost_twin_is_its_only_retry(
    oracle: Oracle, configs: dict[str, ServerConfig]
) -> None:
    """The running twin died with its node: nothing was measured, so the draw that waited for it is
    launched, and the lost twin is not re-queued as well (both ran: one server measured twice, and a
    re-queued copy skips the check for a running twin)."""
    low, twin = _pair(configs)
    study = open_study(oracle.spec, "twins-lost", InMemoryStorage(), resume=False)
    for config in (low, twin):
        study.enqueue_trial(params_for(config))
    executor = TwoNodeExecutor(oracle, lose={low: 1})
    sweep = _sweep(oracle.spec, study, executor, n_trials=3, proposals=False)
    sweep.prepare(resume=False)
    sweep.run()
    assert executor.launched(low) + executor.launched(twin) == 2  # the lost launch and its one retry
    again = _trials_of(study, twin)[0]
    assert TrialAttr.REPEAT_OF not in again.user_attrs and again.state is TrialState.COMPLETE
    assert not [t for t in _queued(study) if TrialAttr.REQUEUED_FROM in t.user_attrs]


def test_a_draw_released_after_the_budget_is_closed_unlaunched_and_the_confirmation_runs(
    oracle: Oracle, configs: dict[str, ServerConfig]
) -> None:
    """The twin's trial code raised (counted: the budget is spent) while a draw waited for it. The draw
    was left for the next run of the loop: the confirmation launched it, a trial already closed, and
    one of its own launches never ran. It is closed, not launched and not re-queued."""
    low, twin = _pair(configs)
    study = open_study(oracle.spec, "twins-end", InMemoryStorage(), resume=False)
    for config in (low, twin, configs["good"]):
        study.enqueue_trial(params_for(config))
    executor = TwoNodeExecutor(oracle)
    executor.raise_for.add(low)
    sweep = _sweep(oracle.spec, study, executor, n_trials=2, proposals=False)
    sweep.prepare(resume=False)
    sweep.reserve_for_confirmation()
    sweep.run()
    sweep.confirm_best()
    assert executor.launched(twin) == 0
    drawn = _trials_of(study, twin)
    assert len(drawn) == 1 and drawn[0].state is TrialState.FAIL
    assert drawn[0].user_attrs[TrialAttr.CLOSED].startswith("not launched")
    assert not _queued(study)  # every confirmation launch ran; nothing left to a --resume


def test_a_waiting_draw_a_dead_driver_left_is_closed_and_not_requeued(
    oracle: Oracle, configs: dict[str, ServerConfig]
) -> None:
    """kill -9 while a draw waited: the next driver closes it (it was never launched, so it is not shown
    as an interrupted launch) and does not queue it again."""
    _, twin = _pair(configs)
    study = open_study(oracle.spec, "twins-stale", InMemoryStorage(), resume=False)
    study.enqueue_trial(params_for(twin))
    trial = study.ask()
    assert suggest_config(trial, oracle.spec.search) == twin
    trial.set_user_attr(TrialAttr.WAITS_FOR, 0)
    assert close_dead_drivers_trials(study) == [trial.number]
    assert study.trials[trial.number].state is TrialState.FAIL
    assert not _queued(study)
