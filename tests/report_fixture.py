"""A small finished study for the report tests, written through the sweep's own funnel: each planned result is
settled by `driver.loop.settle.settle`, told by `driver.store.study.tell` on a trial asked from the study (its
params suggested by `space.suggest_config`), and recorded by the observers' `build_record` and the real
`Tracker.log_trial`. Only the results themselves, and one older sweep's runs, are made by hand."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
import yaml
from mlflow.tracking import MlflowClient

from orchestrator.driver.loop import observers as obs
from orchestrator.driver.loop.settle import settle
from orchestrator.driver.search.space import params_for, suggest_config
from orchestrator.driver.store.study import tell
from orchestrator.driver.store.tracking import Tracker
from orchestrator.driver.store.trial_attrs import TrialAttr
from orchestrator.engines.engine import LaunchSettings, TrialLaunch
from orchestrator.engines.launch import command_argv
from orchestrator.mlflow_schema import SWEEP_KIND, Param, Tag, sweep_tags
from orchestrator.records import (
    Failure,
    FailureKind,
    FailureStage,
    MemoryAccount,
    ServerConfig,
    StageMetrics,
    TrialRecord,
    TrialResult,
    TrialStatus,
)
from orchestrator.spec.search import make_config
from orchestrator.spec.sweep_spec import SweepSpec, parse_spec

ROOT = Path(__file__).resolve().parents[1]
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


PLAN = (
    Planned(0, make_config(0.85, 64, 64), TrialStatus.OK, 1000.0, None, 9.0, 350.0, baseline=True),
    Planned(1, make_config(0.85, 64, 64, 3, 1, 4), TrialStatus.OK, 1800.0, 2.8, 12.0, 300.0),
    Planned(2, make_config(0.88, 128, 128, 5, 4, 8), TrialStatus.OK, 2100.0, 3.4, 18.0, 250.0),
    Planned(3, make_config(0.80, 32, 64, 2, 1, 3), TrialStatus.OK, 1500.0, 2.2, 10.0, 400.0),
    Planned(
        4,
        make_config(0.95, 512, 512, 4, 4, 10),
        TrialStatus.OOM,
        failure=Failure(FailureStage.TARGET_GRAPH_CAPTURE, FailureKind.OOM, OOM_MESSAGE),
        diagnosis=DIAGNOSIS,
    ),
    Planned(5, make_config(0.97, 256, 256, 3, 2, 6), TrialStatus.PREDICTED_OOM),
    Planned(
        6,
        make_config(0.82, 16, 32, 2, 2, 4),
        TrialStatus.FAILED,
        failure=Failure(FailureStage.LAUNCH, FailureKind.CRASH, CRASH_MESSAGE),
    ),
    Planned(7, make_config(0.84, 64, 128, 4, 2, 6), TrialStatus.OK, 1200.0, 3.0, 20.0, 500.0, pruned_at=1),
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


LAUNCH = LaunchSettings(
    engine="sglang",
    model_path="meta-llama/Llama-3.1-8B-Instruct",
    draft_path="yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
    speculative_algorithm="EAGLE3",
    python="python",
)


def _command(config: ServerConfig) -> tuple[str, ...]:
    return command_argv(TrialLaunch(LAUNCH, config, version="0.5.9", port=30000, tp_size=1))


def result_of(p: Planned) -> TrialResult:
    ran = p.status is TrialStatus.OK
    return TrialResult(
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


def fixture_spec() -> SweepSpec:
    """The demo spec with a search space wide enough for every planned configuration, and no latency
    limit (every OK trial's objective is its stage's tok/s)."""
    data: dict[str, Any] = yaml.safe_load((ROOT / "trials" / "demo.yaml").read_text())
    data.update(
        name=STUDY,
        known_good=[],
        objective={"metric": "output_tok_per_s"},
        search={
            "mem_fraction_static": {"low": 0.70, "high": 0.97, "step": 0.01},
            "cuda_graph_max_bs": {"low": 8, "high": 512},
            "max_running_requests": {"low": 8, "high": 512},
            "speculative_num_steps": {"low": 1, "high": 6},
            "speculative_eagle_topk": {"choices": [1, 2, 4, 8]},
            "speculative_num_draft_tokens": {"low": 2, "high": 12},
        },
    )
    return parse_spec(data, "report fixture")


def run_plan(study: optuna.Study, tracker: Tracker, plan: tuple[Planned, ...]) -> list[TrialRecord]:
    """Each planned result as `Sweep._tell_and_record` handles it: settle, tell, then the record; the
    records as the sweep keeps them."""
    spec = fixture_spec()
    speedup = obs.Speedup()
    records = []
    for p in plan:
        study.enqueue_trial(params_for(p.config, spec.search), user_attrs={TrialAttr.BASELINE: p.baseline})
        trial = study.ask()
        assert trial.number == p.number and suggest_config(trial, spec.search) == p.config
        settled = settle(result_of(p), spec, p.pruned_at)
        assert settled.result.status is p.status
        for key, value in settled.attrs.items():
            trial.set_user_attr(key, value)
        tell(study, trial, settled.tell)
        done = obs.Finished(trial.number, settled, p.baseline)
        # What the report shows; the real diagnosis would need the memory model's history of the study.
        done.diagnosis = p.diagnosis
        speedup(done)
        obs.build_record(done)
        assert done.record is not None and tracker.log_trial(done.record) is not None
        records.append(done.record)
    return records


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
    study = optuna.create_study(study_name=STUDY, storage=storage, direction="maximize")
    run_plan(study, tracker, plan)
    tracker.finish({"best_output_tok_per_s": 2100.0}, [])
    study_dir.mkdir(parents=True, exist_ok=True)
    return Store(tracking_uri, storage, study_dir)
