"""What Optuna is told of a finished trial: a value or a state, and the constraints set before.

It stands in the store, beside the study it is told to (`driver.store.study.tell`), rather than in the
loop's `settle` that decides it: the store sits below the loop, and a resumed study is told the same way
(`driver.loop.restore`) as a trial settled now.
"""

from __future__ import annotations

from dataclasses import dataclass

from optuna.trial import TrialState

from orchestrator.records import TrialStatus

OOM_CONSTRAINT = "oom"
SLA_CONSTRAINT = "sla"  # ran, but no stage met the spec's latency limits


@dataclass(frozen=True)
class OptunaTell:
    """What Optuna is told: a value (COMPLETE) or a state, and the constraints set before. (Not
    `driver.answer.choose.Verdict`, which says how sure the sweep's answer is.)"""

    state: TrialState
    value: float | None
    constraints: dict[str, float]


def optuna_tell(status: TrialStatus, objective: float | None, pruned: bool) -> OptunaTell:
    """What Optuna must hear so that the sampler learns from an outcome.

    Infeasible outcomes (OOM at start-up or under load, predicted OOM) are PRUNED with the `oom`
    constraint violated: TPE reads constraints of PRUNED trials and ignores FAIL ones, which is why other
    tuners retry OOMs. A trial that ran but met no latency limit is PRUNED with the `sla` constraint
    violated (a value of 0 would teach TPE a fake zero). A crash, a timeout or a lost node is FAIL: it
    says nothing about memory.
    """
    if status.infeasible:
        return OptunaTell(TrialState.PRUNED, None, {OOM_CONSTRAINT: 1.0})
    if status is TrialStatus.SLA_MISSED:
        return OptunaTell(TrialState.PRUNED, None, {OOM_CONSTRAINT: 0.0, SLA_CONSTRAINT: 1.0})
    if status is TrialStatus.OK:
        feasible = {OOM_CONSTRAINT: 0.0, SLA_CONSTRAINT: 0.0}
        if pruned or objective is None:
            return OptunaTell(TrialState.PRUNED, None, feasible)
        return OptunaTell(TrialState.COMPLETE, objective, feasible)
    return OptunaTell(TrialState.FAIL, None, {})
