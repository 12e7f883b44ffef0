"""Warm start: a new study learns from earlier studies of the same model on the same hardware.

The engineer in the users' notes grepped old logs for a configuration that had worked. This reads the
earlier sweeps in MLflow instead: their best configurations are tried first, their OOMs are added to
the new study as infeasible trials (so the sampler knows the boundary before spending a launch), and
their memory accounts train the memory model. A sweep of the same model on nodes with another GPU count
(another tensor-parallel size) teaches the memory model only, through its started trials' figures
converted to the new tp: its speeds and its OOM boundary do not carry over.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import optuna
from mlflow.tracking import MlflowClient
from optuna.trial import TrialState, create_trial

from orchestrator.config.codec import config_from_mlflow
from orchestrator.driver.memory.learned import MemoryModel
from orchestrator.driver.search.space import params_for, suggest_config
from orchestrator.driver.store.optuna_tell import OOM_CONSTRAINT
from orchestrator.driver.store.trial_attrs import TrialAttr
from orchestrator.mlflow_schema import Metric, Param, Tag, is_sweep
from orchestrator.records import (
    Failure,
    FailureKind,
    FailureStage,
    MemoryAccount,
    ServerConfig,
    TrialResult,
    TrialStatus,
)
from orchestrator.spec.search import SearchSpace
from orchestrator.spec.sweep_spec import SweepSpec

log = logging.getLogger(__name__)
BEST_TO_TRY = 3


@dataclass(frozen=True)
class PastTrial:
    """A trial of an earlier study read back from its MLflow run: what a warm start learns from."""

    experiment: str
    config: ServerConfig
    status: TrialStatus
    tok_s: float | None
    memory: MemoryAccount = field(default_factory=MemoryAccount)
    failure_stage: str = ""
    gpus: int = 0  # GPUs per node (the tp) of its sweep; 0 when unknown

    def result(self) -> TrialResult:
        """What the memory model learns from: the run's configuration, status and memory account (a
        failure's stage only: the run keeps no more of it)."""
        failure = None
        if self.failure_stage:
            failure = Failure(FailureStage(self.failure_stage), FailureKind.OOM, "from history")
        return TrialResult(self.config, self.status, "", (), failure=failure, memory=self.memory)


def find_history(tracking_uri: str, spec: SweepSpec, exclude: str) -> list[PastTrial]:
    """Trials of earlier sweeps with the same model and draft, on nodes of any GPU count."""
    client = MlflowClient(tracking_uri=tracking_uri)
    found: list[PastTrial] = []
    for exp in client.search_experiments():
        if exp.name == exclude:
            continue
        runs = client.search_runs([exp.experiment_id], max_results=5000)
        parents = [r for r in runs if is_sweep(r.data.tags)]
        same = [
            p
            for p in parents
            if p.data.params.get(Param.MODEL_PATH) == spec.model.path
            and p.data.params.get(Param.DRAFT_MODEL_PATH) == spec.model.draft_path
        ]
        if not same:
            continue
        gpus = same[0].data.params.get(Param.GPUS_PER_NODE, "")
        for run in runs:
            tags = run.data.tags
            if is_sweep(tags) or Tag.STATUS not in tags:
                continue
            config = config_from_mlflow(run.data.params)
            if config is None:
                continue
            found.append(
                PastTrial(
                    experiment=exp.name,
                    config=config,
                    status=TrialStatus(tags[Tag.STATUS]),
                    tok_s=run.data.metrics.get(Metric.OUTPUT_TOK_PER_S),
                    memory=MemoryAccount.from_metrics(run.data.metrics),
                    failure_stage=tags.get(Tag.FAILURE_STAGE, ""),
                    gpus=int(gpus) if gpus.isdigit() else 0,
                )
            )
    return found


def _distributions(space: SearchSpace, config: ServerConfig) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The params and distributions the current space gives `config`, or None if it lies outside."""
    probe = optuna.create_study(storage=optuna.storages.InMemoryStorage())
    probe.enqueue_trial(params_for(config, space))
    trial = probe.ask()
    if not config.speculative:
        trial.set_user_attr(TrialAttr.BASELINE, True)
    suggested = suggest_config(trial, space)
    if suggested != config:
        return None  # outside today's space, or not representable in it
    return trial.params, trial.distributions


def seed_study(
    study: optuna.Study, space: SearchSpace, past: list[PastTrial], model: MemoryModel
) -> dict[str, int]:
    """Add the past to `study` and `model`; returns counts of what was used."""
    counts = {"infeasible": 0, "feasible": 0, "enqueued": 0, "memory_points": 0}
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    other_tp = [p for p in past if p.gpus and p.gpus != model.tp]
    for item in other_tp:
        if item.status is TrialStatus.OK and item.memory.kv_cache_tokens:
            model.observe(-1, item.result(), tp=item.gpus)
            counts["memory_points"] += 1
    past = [p for p in past if not (p.gpus and p.gpus != model.tp)]
    for item in past:
        if item.memory.avail_at_start_gb:
            model.observe(-1, item.result())
            counts["memory_points"] += 1
        shape = _distributions(space, item.config)
        if shape is None or item.status is TrialStatus.PREDICTED_OOM:
            continue
        params, dists = shape
        attrs: dict[str, Any] = {
            TrialAttr.WARM_START_FROM: item.experiment,
            TrialAttr.STATUS: item.status.value,
        }
        infeasible = item.status.infeasible
        if not infeasible and not (item.status is TrialStatus.OK and item.tok_s):
            continue  # a crash or a timeout says nothing the new study can use
        study.add_trial(
            create_trial(
                state=TrialState.PRUNED if infeasible else TrialState.COMPLETE,
                value=None if infeasible else item.tok_s,
                params=params,
                distributions=dists,
                user_attrs=attrs,
                constraints={OOM_CONSTRAINT: 1.0 if infeasible else 0.0},
            )
        )
        counts["infeasible" if infeasible else "feasible"] += 1
    best = sorted((p for p in past if p.status is TrialStatus.OK and p.tok_s), key=lambda p: -(p.tok_s or 0))
    for item in best[:BEST_TO_TRY]:
        if item.config.speculative and _distributions(space, item.config) is not None:
            # Run it again even though the study now holds its old result: the hardware, driver or
            # SGLang may have changed since, and a known-good configuration is the cheapest anchor.
            study.enqueue_trial(params_for(item.config, space), user_attrs={TrialAttr.KNOWN_GOOD: True})
            counts["enqueued"] += 1
    log.info("warm start: %s", counts)
    return counts
