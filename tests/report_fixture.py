"""A small finished study for the report tests: MLflow runs written by the real Tracker, and the
matching Optuna study told through the sweep's own `tell_outcome` (OOMs pruned, crashes failed)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import optuna
from mlflow.tracking import MlflowClient
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution

from orchestrator.driver.attrs import TrialAttr
from orchestrator.driver.settle import attributes, verdict
from orchestrator.mlflow_schema import SWEEP_KIND, Param, Tag, TrialRecord, sweep_tags
from orchestrator.records import (
    Failure,
    FailureKind,
    FailureStage,
    MemoryAccount,
    ServerConfig,
    StageMetrics,
    TrialResult,
    TrialStatus,
)
from orchestrator.tracking import Tracker

STUDY = "demo-study"
MEMORY = {
    "avail_at_start_gb": 139.09,
    "weights_gb": 16.06,
    "kv_cache_tokens": 512000.0,
    "kv_cache_gb": 61.5,
    "graph_gb": 2.1,
    "draft_graph_gb": 0.62,
    "avail_end_gb": 8.4,
}
OOM_MESSAGE = "Capture cuda graph failed: CUDA out of memory. Tried to allocate 126.00 MiB"
CRASH_MESSAGE = "Scheduler hit an exception: RuntimeError: boom"
DIAGNOSIS = "graph capture at bs 512 needs more than the 5% left outside the static pool"


@dataclass(frozen=True)
class Planned:
    number: int
    config: ServerConfig
    status: TrialStatus
    tok_s: float | None = None
    accept: float | None = None
    itl_p99: float = 0.0
    ttft_p99: float = 0.0
    failure: Failure | None = None
    diagnosis: str = ""
    baseline: bool = False
    pruned_at: int | None = None


def _spec(mf: float, gbs: int, mrr: int, steps: int, topk: int, draft: int) -> ServerConfig:
    return ServerConfig(mf, gbs, mrr, steps, topk, draft)


PLAN = (
    Planned(0, ServerConfig(0.85, 64, 64), TrialStatus.OK, 1000.0, None, 9.0, 350.0, baseline=True),
    Planned(1, _spec(0.85, 64, 64, 3, 1, 4), TrialStatus.OK, 1800.0, 2.8, 12.0, 300.0),
    Planned(2, _spec(0.88, 128, 128, 5, 4, 8), TrialStatus.OK, 2100.0, 3.4, 18.0, 250.0),
    Planned(3, _spec(0.80, 32, 64, 2, 1, 3), TrialStatus.OK, 1500.0, 2.2, 10.0, 400.0),
    Planned(
        4,
        _spec(0.95, 512, 512, 4, 4, 10),
        TrialStatus.OOM,
        failure=Failure(FailureStage.TARGET_GRAPH_CAPTURE, FailureKind.OOM, OOM_MESSAGE),
        diagnosis=DIAGNOSIS,
    ),
    Planned(5, _spec(0.97, 256, 256, 3, 2, 6), TrialStatus.PREDICTED_OOM),
    Planned(
        6,
        _spec(0.82, 16, 32, 2, 2, 4),
        TrialStatus.FAILED,
        failure=Failure(FailureStage.LAUNCH, FailureKind.CRASH, CRASH_MESSAGE),
    ),
    Planned(7, _spec(0.84, 64, 128, 4, 2, 6), TrialStatus.OK, 1200.0, 3.0, 20.0, 500.0, pruned_at=1),
)
BEST = 2  # the highest tok/s among the ok trials


def _stage(p: Planned) -> StageMetrics:
    tok = p.tok_s or 0.0
    return StageMetrics(
        concurrency=32,
        num_requests=64,
        completed=64,
        failed=0,
        duration_s=10.0,
        output_tok_per_s=tok,
        request_per_s=6.4,
        ttft_p50_ms=p.ttft_p99 / 2,
        ttft_p99_ms=p.ttft_p99,
        itl_p50_ms=p.itl_p99 / 2,
        itl_p99_ms=p.itl_p99,
        tpot_p50_ms=p.itl_p99 / 3,
        accept_length=p.accept,
    )


def _command(config: ServerConfig) -> tuple[str, ...]:
    argv = ["python", "-m", "sglang.launch_server", "--model-path", "meta-llama/Llama-3.1-8B-Instruct"]
    for key, value in config.as_params().items():
        argv += [f"--{key.replace('_', '-')}", str(value)]
    if config.speculative:
        argv += ["--speculative-algorithm", "EAGLE3"]
    return tuple(argv)


def record_of(p: Planned) -> TrialRecord:
    ran = p.status is TrialStatus.OK
    result = TrialResult(
        config=p.config,
        status=p.status,
        node_id="node-a",
        command=() if p.status is TrialStatus.PREDICTED_OOM else _command(p.config),
        startup_s=42.0 if ran else None,
        failure=p.failure,
        stages=(_stage(p),) if ran else (),
        memory=MemoryAccount.from_metrics(MEMORY) if ran else MemoryAccount(),
        server_version="0.5.17",
        log_text="Load weight end. avail mem=139.09 GB\n",
        wall_s=60.0,
    )
    return TrialRecord(
        number=p.number,
        result=result,
        objective=p.tok_s if ran else None,
        speedup_vs_baseline=p.tok_s / 1000.0 if ran and p.tok_s and not p.baseline else None,
        diagnosis=p.diagnosis,
        baseline=p.baseline,
        extra_tags=((Tag.PRUNED_AT_STAGE.value, str(p.pruned_at)),) if p.pruned_at is not None else (),
    )


def _distributions(config: ServerConfig) -> dict[str, BaseDistribution]:
    dists: dict[str, BaseDistribution] = {
        "mem_fraction_static": FloatDistribution(0.7, 0.97),
        "cuda_graph_max_bs": IntDistribution(8, 512),
        "max_running_requests": IntDistribution(8, 512),
    }
    if config.speculative:
        steps, topk = config.speculative_num_steps or 0, config.speculative_eagle_topk or 0
        dists["speculative_num_steps"] = IntDistribution(1, 6)
        dists["speculative_eagle_topk"] = CategoricalDistribution([1, 2, 4, 8])
        if topk > 1:  # with top-k 1 SGLang derives the draft tokens: not a searched value
            dists["speculative_num_draft_tokens"] = IntDistribution(steps + 1, topk * steps + 1)
    return dists


def tell_optuna(study: optuna.Study, plan: tuple[Planned, ...]) -> None:
    """Each planned trial as the driver tells it: attributes and verdict from `driver.settle`."""
    for p in plan:
        result = record_of(p).result
        dists = _distributions(p.config)
        params = {k: v for k, v in p.config.as_params().items() if k in dists}
        result = record_of(p).result
        attrs = attributes(result)
        if p.baseline:
            attrs[TrialAttr.BASELINE] = True
        objective = p.tok_s if p.status is TrialStatus.OK else None
        told = verdict(p.status, objective, pruned=p.pruned_at is not None)
        study.add_trial(
            optuna.trial.create_trial(
                params=params,
                distributions=dists,
                value=told.value,
                state=told.state,
                user_attrs=attrs,
                constraints=told.constraints or None,
            )
        )


@dataclass(frozen=True)
class Store:
    tracking_uri: str
    storage: str
    study_dir: Path


def build_store(root: Path, plan: tuple[Planned, ...] = PLAN) -> Store:
    """Write the plan as a sweep would, after an older sweep of the same name that was not resumed."""
    tracking_uri = f"sqlite:///{root / 'mlflow.db'}"
    storage = f"sqlite:///{root / 'optuna.db'}"
    study_dir = root / STUDY
    client = MlflowClient(tracking_uri=tracking_uri)
    exp = client.create_experiment(STUDY, artifact_location=(root / "artifacts").as_uri())
    # An earlier sweep whose study was deleted since: its trial numbers clash with the current ones.
    old_tags = {Tag.KIND.value: SWEEP_KIND, **sweep_tags(STUDY, resume=False)}
    old = client.create_run(exp, start_time=1_000, tags=old_tags)
    stale = {
        Tag.PARENT_RUN: old.info.run_id,
        Tag.STATUS: "failed",
        Tag.TRIAL_NUMBER: "1",
        Tag.CONFIG: "stale",
    }
    client.create_run(exp, start_time=2_000, tags={k.value: v for k, v in stale.items()})
    tracker = Tracker(tracking_uri, STUDY, root / "spool")
    tracker.start("sweep", params={Param.TRIALS.value: str(len(plan))}, tags=sweep_tags(STUDY, resume=False))
    for p in plan:
        assert tracker.log_trial(record_of(p)) is not None
    tracker.finish({"best_output_tok_per_s": 2100.0}, [])
    study = optuna.create_study(study_name=STUDY, storage=storage, direction="maximize")
    tell_optuna(study, plan)
    study_dir.mkdir(parents=True, exist_ok=True)
    return Store(tracking_uri, storage, study_dir)
