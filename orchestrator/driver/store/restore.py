"""--resume: rebuild what the driver learned from the study's finished trials, so a resumed sweep neither
relaunches a configuration it has measured nor proposes what its memory model rules out."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from orchestrator.config.codec import config_from_optuna, known_good_params
from orchestrator.driver.loop.observers import Measured
from orchestrator.driver.loop.outcome import Progress
from orchestrator.driver.memory.learned import MemoryModel
from orchestrator.driver.proposal.structure import choose_structure, fitting_config
from orchestrator.driver.search.space import baseline_config
from orchestrator.driver.store.study import status_of
from orchestrator.driver.store.study_lock import closed_numbers
from orchestrator.driver.store.trial_attrs import TrialAttr
from orchestrator.records import (
    Failure,
    FailureKind,
    FailureStage,
    MemoryAccount,
    ResolvedLaunch,
    ServerConfig,
    TrialResult,
    TrialStatus,
)
from orchestrator.spec.sweep_spec import SweepSpec


@dataclass
class Restored:
    progress: Progress = field(default_factory=Progress)
    baseline_tok_s: float | None = None
    measured: Measured = field(default_factory=dict)
    memory: list[tuple[int, TrialResult]] = field(default_factory=list)  # what the memory model relearns
    numbers: list[int] = field(default_factory=list)  # every trial the driver settled (its journal's)


def restore(study: optuna.Study) -> Restored:
    out = Restored()
    p = out.progress
    closed = closed_numbers(study)
    for t in study.get_trials(deepcopy=False):
        if (
            not t.state.is_finished()
            or t.number in closed
            or TrialAttr.CLOSED in t.user_attrs
            or TrialAttr.WARM_START_FROM in t.user_attrs
        ):
            continue
        status = status_of(t)
        if status is None:
            continue
        if TrialAttr.REPEAT_OF not in t.user_attrs:
            out.numbers.append(t.number)
        baseline = bool(t.user_attrs.get(TrialAttr.BASELINE))
        if TrialAttr.REPEAT_OF not in t.user_attrs and not status.free and not baseline:
            p.done += 1
        if status.infeasible:
            p.pruned_oom += 1
        elif status is not TrialStatus.OK:
            p.failed += 1
        tok = t.user_attrs.get(TrialAttr.OUTPUT_TOK_PER_S)
        if t.user_attrs.get(TrialAttr.BASELINE) and tok:
            out.baseline_tok_s = float(tok)
        if (
            t.state == TrialState.COMPLETE
            and not baseline
            and t.value is not None
            and (p.best_tok_s is None or t.value > p.best_tok_s)
        ):
            p.best_tok_s, p.best_number = t.value, t.number
        config = config_from_optuna(t.params)  # the adaptive mode too: a fixed proposal is not this
        if config is None or TrialAttr.REPEAT_OF in t.user_attrs:
            continue
        pruned = t.state == TrialState.PRUNED and not status.infeasible
        if (status is TrialStatus.OK and not pruned) or status.infeasible:
            value = t.value if t.state == TrialState.COMPLETE else None
            out.measured.setdefault(config, (t.number, status, value))
        memory = t.user_attrs.get(TrialAttr.MEMORY)
        if isinstance(memory, dict) and status is not TrialStatus.PREDICTED_OOM:
            out.memory.append((t.number, replayed_result(t, config, status, memory)))
    return out


def replayed_result(
    t: FrozenTrial, config: ServerConfig, status: TrialStatus, memory: dict[str, Any]
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
        memory=MemoryAccount.from_metrics(
            {k: float(v) for k, v in memory.items() if isinstance(v, int | float)}
        ),
        resolved_args=ResolvedLaunch(mem_fraction_static=float(fraction)),
    )


def baseline_params(spec: SweepSpec, model: MemoryModel) -> dict[str, Any]:
    """The baseline's memory flags by the structure rule the policy launches its first trees with (graphs
    and running requests covering the highest concurrency, the highest fraction the memory model is sure
    fits): the server without speculation is a candidate answer, so it gets the flags it would run with.
    The middle of the space when the model rules out every fraction (its launch then teaches it)."""
    structure = choose_structure(spec.search, spec.workload.concurrency)
    config = fitting_config(structure, None, model)
    if config is None:
        return baseline_config(spec.search, None)
    return {
        "mem_fraction_static": config.mem_fraction_static,
        "cuda_graph_max_bs": config.cuda_graph_max_bs,
        "max_running_requests": config.max_running_requests,
    }


def enqueue_first(study: optuna.Study, spec: SweepSpec, model: MemoryModel | None = None) -> None:
    """A new study runs the no-speculation baseline (when asked) and the known-good configurations first."""
    if spec.budget.baseline:
        study.enqueue_trial(
            baseline_params(spec, model if model is not None else MemoryModel(spec.node.gpus)),
            user_attrs={TrialAttr.BASELINE: True},
            skip_if_exists=True,
        )
    for known in spec.known_good:
        params = known_good_params(known, spec.search)
        study.enqueue_trial(params, user_attrs={TrialAttr.KNOWN_GOOD: True}, skip_if_exists=True)
