"""--resume: rebuild what the driver learned from the study's finished trials, so a resumed sweep neither
relaunches a configuration it has measured nor proposes what its memory model rules out.

The study keeps the search state (which trials were asked and settled, their params, what the sampler
was told); each trial's result comes from its journal record (`driver.journal`), the driver's own whole
`TrialRecord`, and only a trial without one (a study older than the journal, a journal folder lost or
moved) is read back from the study's user attributes, which hold a summary of it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from orchestrator.config.fields import SearchedField as F
from orchestrator.driver.loop.observers import Measured
from orchestrator.driver.loop.outcome import Progress
from orchestrator.driver.memory.learned import MemoryModel
from orchestrator.driver.memory.prior_model import from_prior
from orchestrator.driver.proposal.structure import (
    UNSURE_QUANTILE,
    choose_structure,
    fitting_config,
    has_prior,
)
from orchestrator.driver.proposal.trees import dim_values
from orchestrator.driver.search.space import (
    baseline_config,
    config_from_params,
    known_good_params,
    memory_params,
)
from orchestrator.driver.store.journal import Journal
from orchestrator.driver.store.optuna_tell import optuna_tell
from orchestrator.driver.store.study import status_of
from orchestrator.driver.store.study_lock import closed_numbers
from orchestrator.driver.store.trial_attrs import TrialAttr, free_reference
from orchestrator.mlflow_schema import Tag
from orchestrator.records import (
    Failure,
    FailureKind,
    FailureStage,
    MemoryAccount,
    ResolvedLaunch,
    ServerConfig,
    TrialRecord,
    TrialResult,
    TrialStatus,
)
from orchestrator.spec.search import SearchSpace
from orchestrator.spec.sweep_spec import SweepSpec

log = logging.getLogger(__name__)


@dataclass
class Restored:
    progress: Progress = field(default_factory=Progress)
    baseline_tok_s: float | None = None
    measured: Measured = field(default_factory=dict)
    memory: list[tuple[int, TrialResult]] = field(default_factory=list)  # what the memory model relearns
    numbers: list[int] = field(default_factory=list)  # every trial the driver settled (its journal's)
    records: list[TrialRecord] = field(default_factory=list)  # their journal records, those found


@dataclass(frozen=True)
class _Outcome:
    """What a settled trial's result says, as --resume reads it."""

    status: TrialStatus
    baseline: bool
    tok_s: float | None  # the best stage's output tok/s
    value: float | None  # what Optuna was told for a COMPLETE trial, else None
    config: ServerConfig | None
    result: TrialResult | None  # what the memory model relearns, when it has a memory account


def _from_record(record: TrialRecord, baseline: bool) -> _Outcome:
    r = record.result
    pruned = record.tag(Tag.PRUNED_AT_STAGE) is not None
    told = optuna_tell(r.status, record.objective, pruned)
    learns = bool(r.memory.as_metrics()) and r.status is not TrialStatus.PREDICTED_OOM
    return _Outcome(r.status, baseline, r.output_tok_per_s, told.value, r.config, r if learns else None)


def _from_attrs(t: FrozenTrial, status: TrialStatus) -> _Outcome:
    """A trial with no journal record: its result as the study's attributes summarise it."""
    tok = t.user_attrs.get(TrialAttr.OUTPUT_TOK_PER_S)
    value = t.value if t.state == TrialState.COMPLETE else None
    config = config_from_params(t.params)  # the adaptive mode too: a fixed proposal is not this
    memory = t.user_attrs.get(TrialAttr.MEMORY)
    result = None
    if config is not None and isinstance(memory, dict) and status is not TrialStatus.PREDICTED_OOM:
        result = replayed_result(t, config, status, memory)
    baseline = bool(t.user_attrs.get(TrialAttr.BASELINE))
    return _Outcome(status, baseline, float(tok) if tok else None, value, config, result)


def restore(study: optuna.Study, journal: Journal) -> Restored:
    out = Restored()
    p = out.progress
    closed = closed_numbers(study)
    settled: list[tuple[FrozenTrial, TrialStatus]] = []
    for t in study.get_trials(deepcopy=False):
        if (
            not t.state.is_finished()
            or t.number in closed
            or TrialAttr.CLOSED in t.user_attrs
            or TrialAttr.WARM_START_FROM in t.user_attrs
        ):
            continue
        status = status_of(t)  # the driver settled it (the search state): its result is in the journal
        if status is not None:
            settled.append((t, status))
    out.numbers = [t.number for t, _ in settled if TrialAttr.REPEAT_OF not in t.user_attrs]
    out.records = journal.read(out.numbers)
    by_number = {r.number: r for r in out.records}
    if journal.folder is not None and len(out.records) < len(out.numbers):
        log.warning(
            "%d of the study's %d trials have no journal record: their results are read back from the "
            "study's attributes",
            len(out.numbers) - len(out.records),
            len(out.numbers),
        )
    for t, status in settled:
        repeat = t.user_attrs.get(TrialAttr.REPEAT_OF)
        # A repeat was answered from an earlier trial's record, which is its result too.
        record = by_number.get(int(repeat) if isinstance(repeat, int) else t.number)
        if record is None:
            o = _from_attrs(t, status)
        else:
            o = _from_record(
                record, record.baseline if repeat is None else bool(t.user_attrs.get(TrialAttr.BASELINE))
            )
        if (
            repeat is None
            and not o.status.free
            and not free_reference(o.baseline, t.user_attrs.get(TrialAttr.CONFIRM_OF))
        ):
            p.done += 1
        if o.status.infeasible:
            p.pruned_oom += 1
        elif o.status is not TrialStatus.OK:
            p.failed += 1
        if o.baseline and o.tok_s and out.baseline_tok_s is None:
            out.baseline_tok_s = o.tok_s
        if not o.baseline and o.value is not None and (p.best_tok_s is None or o.value > p.best_tok_s):
            p.best_tok_s, p.best_number = o.value, t.number
        if o.config is None or repeat is not None:
            continue
        if (o.status is TrialStatus.OK and o.value is not None) or o.status.infeasible:
            out.measured.setdefault(o.config, (t.number, o.status, o.value))
        if o.result is not None:
            out.memory.append((t.number, o.result))
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
    """The baseline's memory flags by the structure rule the policy launches its trees with (graphs and
    running requests covering the highest concurrency): the server without speculation is a candidate
    answer, so it gets the flags it would be served with, at the highest fraction the memory model does
    not rule out. With the prior that is its serving ceiling: no draft can fail late there (the reason a
    tree's first guess stays in the middle), and the prior's start-up and serving figures err on the safe
    side (the 24B shape's baseline served at 0.97 with 3.84 GiB free, predicted to need 5.02). Without the
    prior, the middle of what is not ruled out (its launch then teaches the model)."""
    structure = choose_structure(spec.search, spec.workload.concurrency)
    quantile = 1.0 if has_prior(model) else UNSURE_QUANTILE
    config = fitting_config(structure, None, model, unsure_quantile=quantile)
    if config is None:
        return baseline_config(spec.search, None)
    return memory_params(config)


def known_good_at_ceiling(known: ServerConfig, space: SearchSpace, model: MemoryModel) -> ServerConfig | None:
    """A known-good configuration the prior says runs out of memory, at the highest searched fraction
    below its own that the model does not rule out (its serving ceiling), with the user's other flags;
    None when it is not ruled out, or no lower fraction is open. The user wrote it for a reason: dropping
    it left the search to find the same tree again, at the middle of the range."""
    prediction = model.predict(known)
    if not prediction.skip or not from_prior(prediction):
        return None
    fractions = dim_values(space.mem_fraction_static, integer=False)
    for fraction in sorted((f for f in fractions if f < known.mem_fraction_static), reverse=True):
        config = replace(known, mem_fraction_static=fraction)
        if not model.predict(config).skip:
            return config
    return None


def enqueue_first(study: optuna.Study, spec: SweepSpec, model: MemoryModel | None = None) -> None:
    """A new study runs the no-speculation baseline (when asked) and the known-good configurations first."""
    model = model if model is not None else MemoryModel(spec.node.gpus)
    if spec.budget.baseline:
        study.enqueue_trial(
            baseline_params(spec, model),
            user_attrs={TrialAttr.BASELINE: True},
            skip_if_exists=True,
        )
    for known in spec.known_good:
        params = known_good_params(known, spec.search)
        attrs: dict[str, Any] = {TrialAttr.KNOWN_GOOD: True}
        lowered = known_good_at_ceiling(known.to_config(), spec.search, model)
        if lowered is not None:
            log.warning(
                "known_good %s: the memory model rules out mem_fraction_static %.3f (%s); launched at "
                "%.3f, the highest searched fraction it does not",
                known.to_config().label(),
                known.mem_fraction_static,
                model.predict(known.to_config()).reason,
                lowered.mem_fraction_static,
            )
            params[F.MEM_FRACTION_STATIC.value] = lowered.mem_fraction_static
            attrs[TrialAttr.KNOWN_GOOD_FRACTION] = known.mem_fraction_static
        study.enqueue_trial(params, user_attrs=attrs, skip_if_exists=True)
