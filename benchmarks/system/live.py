"""Specs and helpers for the benchmarks that start real simulated servers (give-up time, overhead, scale).

They run the product's own code paths (`TrialRun`, `Sweep` on Ray, `Tracker` on SQLite); only the spec is
made small: a short workload, a profile whose start-up is compressed, a space where everything fits.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.harness.paths import DEMO_SPEC
from orchestrator.records import TrialResult
from orchestrator.sim.profile import load_profile
from orchestrator.spec.search import Choices, FloatRange, IntRange, SearchSpace
from orchestrator.spec.sweep_spec import SimulatedSpec, SweepSpec, TimeoutSpec, WorkloadSpec

# One short stage: what the orchestrator adds around a trial shows, not the serving. Without the stage
# minimum that real hardware needs (20 s and 5000 tokens: the stage would cycle its prompts for a minute).
MINIMAL_WORKLOAD = WorkloadSpec(
    num_prompts=2,
    input_len=16,
    output_len=8,
    concurrency=[2],
    seed=0,
    warmup_prompts=0,
    min_stage_s=0,
    min_stage_tokens=0,
)

# The demo's timeouts with a 2 s stop grace: a server that does not exit on SIGINT (inside a Ray worker the
# signal arrives blocked unless the trial clears the inherited mask) costs 2 s per trial here, not 10, and
# the overhead benchmark counts such trials.
LIVE_TIMEOUTS = TimeoutSpec(startup_s=120, benchmark_s=120, gpu_clean_s=20, stop_s=2, hang_after_error_s=10)

# Every point fits on an H200 or on the Kimi node at these fractions: trials end OK, never OOM. 1224
# configurations, so that 100 trials do not exhaust them: once TPE has measured most of a space it keeps
# proposing repeats, which the driver answers without a launch but with an ask each.
FITTING_SPACE = SearchSpace(
    mem_fraction_static=FloatRange(low=0.80, high=0.88, step=0.005),
    cuda_graph_max_bs=Choices(choices=[8, 16, 32]),
    max_running_requests=Choices(choices=[4, 8, 16]),
    speculative_num_steps=IntRange(low=1, high=3),
    speculative_eagle_topk=Choices(choices=[1, 2]),
    speculative_num_draft_tokens=IntRange(low=2, high=4),
)


def profile_dict(name: str, **overrides: Any) -> dict[str, Any]:
    """A built-in profile as the driver ships it to the trials (JSON-ready), with some fields changed."""
    data = load_profile(name).model_dump(mode="json")
    data.update(overrides)
    return data


def live_spec(
    name: str,
    profile: dict[str, Any],
    *,
    workload: WorkloadSpec = MINIMAL_WORKLOAD,
    space: SearchSpace = FITTING_SPACE,
    timeouts: TimeoutSpec | None = None,
    seed: int = 0,
) -> SweepSpec:
    from orchestrator.spec.sweep_spec import load_spec

    spec = load_spec(DEMO_SPEC)
    return spec.model_copy(
        update={
            "name": name,
            "simulated": SimulatedSpec(profile=profile, seed=0),
            "node": spec.node.model_copy(update={"gpus": int(profile["gpu_count"])}),
            "search": space,
            "workload": workload,
            "known_good": [],
            "budget": spec.budget.model_copy(update={"baseline": False}),
            "timeouts": timeouts or LIVE_TIMEOUTS,
            "sampler_seed": seed,
        }
    )


@dataclass(frozen=True)
class SweepRun:
    wall_s: float  # Sweep.run() from the first submission to the last result told and recorded
    results: tuple[TrialResult, ...]  # the launched trials (predicted-OOM skips left out)
    nodes: int


def run_sweep(spec: SweepSpec, profile: dict[str, Any], n_trials: int, workdir: Path, nodes: int) -> SweepRun:
    """The real driver on whatever Ray cluster is connected: study on SQLite, MLflow on SQLite."""
    from orchestrator.driver.loop.sweep import Sweep
    from orchestrator.driver.store.study import open_study
    from orchestrator.driver.store.tracking import Tracker

    workdir.mkdir(parents=True, exist_ok=True)
    study = open_study(spec, spec.name, f"sqlite:///{workdir / 'optuna.db'}", resume=False)
    tracker = Tracker(f"sqlite:///{workdir / 'mlflow.db'}", spec.name, workdir / "spool")
    tracker.start("benchmark", {}, {})
    # TPE alone proposes: these benchmarks measure the orchestration of a fixed number of trials at every
    # cluster size, and the proposal policy would end a sweep as soon as its answer is known.
    sweep = Sweep(
        spec, study, tracker, n_trials=n_trials, workdir=workdir, sim_profile=profile, proposals=False
    )
    sweep.prepare(resume=False)
    t0 = time.monotonic()
    outcome = sweep.run()
    wall = time.monotonic() - t0
    tracker.finish({}, [])
    launched = tuple(r.result for r in outcome.records if r.result.node_id)
    return SweepRun(wall, launched, nodes)


def killed_after_stop(result: TrialResult) -> bool:
    """The server did not exit within the stop grace and was SIGKILLed (the trial notes it)."""
    return any(note.startswith("SIGKILLed") for note in result.notes)


def inside_trial_s(result: TrialResult) -> tuple[float, float, float]:
    """(trial wall, server start-up, benchmark stages) in seconds."""
    bench = sum(s.duration_s for s in result.stages)
    return result.wall_s, result.startup_s or 0.0, bench
