"""What a finished trial means, decided without any I/O: its final status, its objective, what Optuna is
told, and the attributes the study keeps for it.

Everything the driver records about a trial comes out of `settle`; the tell and the observers only carry
it out. That keeps the decision testable on its own and the same for every path a result takes (a run, a
predicted OOM, a lost node).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from orchestrator.driver.store.optuna_tell import OptunaTell, optuna_tell
from orchestrator.driver.store.trial_attrs import TrialAttr
from orchestrator.records import TrialResult, TrialStatus
from orchestrator.spec.sweep_spec import SweepSpec


@dataclass(frozen=True)
class Settled:
    """A finished trial, decided: the result (its status final), objective, what Optuna is told, and the
    attributes."""

    result: TrialResult
    objective: float | None
    pruned_at: int | None
    tell: OptunaTell
    attrs: dict[str, Any]

    @property
    def pruned(self) -> bool:
        return self.pruned_at is not None

    @property
    def measured(self) -> bool:
        """A full measurement (or an infeasible start) of its configuration: worth answering repeats from."""
        status = self.result.status
        return (status is TrialStatus.OK and not self.pruned) or status.infeasible


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


def attributes(result: TrialResult) -> dict[str, Any]:
    """The study's record of a trial: what the end-of-run table and --resume read back."""
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
    memory = result.memory.as_metrics()
    if memory:
        attrs[TrialAttr.MEMORY] = memory
    fraction = result.resolved_args.mem_fraction_static
    if fraction is not None:
        attrs[TrialAttr.RESOLVED_MEM_FRACTION] = float(fraction)
    return attrs


def settle(result: TrialResult, spec: SweepSpec, pruned_at: int | None) -> Settled:
    """Decide what a finished trial means. A trial that ran stages, was not pruned, and met the latency
    limits in none of them is SLA_MISSED, not OK: it has no objective to tell."""
    objective = objective_value(result, spec) if result.status is TrialStatus.OK else None
    ran = any(s.completed > 0 for s in result.stages)
    if objective is None and result.status is TrialStatus.OK and pruned_at is None and ran:
        result = replace(result, status=TrialStatus.SLA_MISSED)
    return Settled(
        result=result,
        objective=objective,
        pruned_at=pruned_at,
        tell=optuna_tell(result.status, objective, pruned_at is not None),
        attrs=attributes(result),
    )
