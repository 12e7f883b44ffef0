"""What a launch of one configuration would give on a simulated node, computed without launching it.

The launch goes through the same code the simulated server runs: the real command line
(the engine's `flags`), SGLang's argument rules (`orchestrator.sim.args`), the start-up memory walk
(`plan_startup`) and the speed and acceptance models. On top of those pure pieces this module adds what
only the running server and the trial know, as noise-free expectations:

- the memory account as `LogParser` reads it from the server's lines (`MemoryAccount`, same names and the
  same two-decimal rounding as printed), so `MemoryModel.observe` learns from it as in a real sweep;
- the trial's KV-pressure probe (`node.trial_load.kv_probe`): the scheduler's admission and retraction rules
  replayed step by step for `max_running_requests` requests;
- each benchmark stage's throughput: requests run in waves of the running batch, each wave a prefill then
  decode steps of `step_time(batch)` yielding the expected accept length per request, read as the client
  reads them (`benchmarks.truth.lockstep`: its steady window over the waves its closed loop runs).

Times are real-world seconds (the profile's start-up times unscaled), so GPU-hours are what a real node
would spend.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from benchmarks.truth.lockstep import client_view
from orchestrator.config import adaptive
from orchestrator.driver.memory.kv_admission import retracts
from orchestrator.engines import engine_for
from orchestrator.engines.engine import LaunchSettings, TrialLaunch
from orchestrator.footprint.sglang_defaults import INIT_NEW_TOKEN_RATIO
from orchestrator.records import (
    Failure,
    FailureKind,
    FailureStage,
    MemoryAccount,
    ResolvedLaunch,
    ServerConfig,
    StageMetrics,
    TrialResult,
    TrialStatus,
)
from orchestrator.sim.args import SimArgs, build_parser, explicit_dests, resolve
from orchestrator.sim.memory import OomKind, StartupPlan, StepKind, plan_startup
from orchestrator.sim.profile import SimProfile
from orchestrator.sim.speed import (
    SpeedModel,
    broken_draft_reason,
    expected_accept_length,
    position_probs,
)
from orchestrator.spec.sweep_spec import SweepSpec, WorkloadSpec

OOM_EXIT_S = 0.1  # SGLang's launcher dies 0.07-0.12 s after the error line (real 0.5.17 logs)
STOP_S = 3.4  # SIGINT to exit of a serving 0.5.17 server (real logs)
SERVER_WARMUP_TOKENS = 8  # the server's own warm-up request before "fired up"


@dataclass(frozen=True)
class Evaluation:
    """One configuration's launch, as the trial would report it, plus what it costs in time."""

    config: ServerConfig
    status: TrialStatus
    failure: Failure | None
    stages: tuple[StageMetrics, ...]
    memory: MemoryAccount
    resolved_args: ResolvedLaunch
    startup_s: float  # launch to ready (or to the process gone, for a failed start)
    pre_stage_s: float  # warm-up prompts and the KV probe, when they run
    stop_s: float
    accept_length: float | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def objective(self) -> float | None:
        ok = [s.output_tok_per_s for s in self.stages if s.completed > 0]
        return max(ok) if ok and self.status is TrialStatus.OK else None

    def seconds(self, stages_run: int | None = None) -> float:
        """Wall time on the node for the launch, running the first `stages_run` stages (all by default)."""
        stages = self.stages if stages_run is None else self.stages[:stages_run]
        return self.startup_s + self.pre_stage_s + sum(s.duration_s for s in stages) + self.stop_s

    def result(self, stages_run: int | None = None, node_id: str = "oracle") -> TrialResult:
        """The `TrialResult` a trial would send back (only the stages it ran before a prune)."""
        stages = self.stages if stages_run is None else self.stages[:stages_run]
        return TrialResult(
            config=self.config,
            status=self.status,
            node_id=node_id,
            command=(),
            startup_s=self.startup_s if self.status is TrialStatus.OK else None,
            failure=self.failure,
            stages=stages,
            server_accept_length=self.accept_length,
            memory=self.memory,
            resolved_args=self.resolved_args,
            server_version="0.5.17",
            wall_s=self.seconds(stages_run),
            notes=self.notes,
        )


def memory_account(plan: StartupPlan) -> MemoryAccount:
    """What `LogParser` reads from the simulated server's start-up lines, walked from the same plan.

    Figures are printed with two decimals; the account takes rank 0's first `Load weight` as the start,
    the `Memory pool end` lines seen before any capture as the room left for graphs, and only finished
    captures as graph memory.
    """
    steps = plan.steps
    weights = [s for s in steps if s.kind is StepKind.WEIGHTS]
    kv = [s for s in steps if s.kind is StepKind.KV]
    first_graph = next((i for i, s in enumerate(steps) if s.kind is StepKind.GRAPH), len(steps))
    first_kv = next((i for i, s in enumerate(steps) if s.kind is StepKind.KV), len(steps))
    before_kv = [s for s in steps[:first_kv] if s.kind is StepKind.WEIGHTS]
    kv_before_graphs = [s for s in steps[:first_graph] if s.kind is StepKind.KV]
    target_kv = [s for s in kv if s.role == "target"]
    draft_kv = [s for s in kv if s.role == "draft"]
    graphs = [s for s in steps if s.kind is StepKind.GRAPH]

    def r2(x: float) -> float:
        return round(x, 2)

    def total(values: list[float]) -> float | None:
        return round(sum(r2(v) for v in values), 2) if values else None

    failure = plan.failure
    last_avail: float | None = r2(steps[-1].avail_after) if steps else None
    if failure is not None and failure.name and failure.kind in (OomKind.CAPTURE, OomKind.RAW_OOM):
        last_avail = r2(failure.start_avail_gib)  # the failing runner's own `begin` line
    return MemoryAccount(
        avail_at_start_gb=r2(weights[0].avail_before) if weights else None,
        weights_gb=r2(weights[0].usage) if weights else None,
        draft_weights_gb=total([s.usage for s in weights[1:]]),
        avail_after_weights_gb=r2(before_kv[-1].avail_after) if before_kv else None,
        kv_cache_tokens=target_kv[0].kv_tokens if target_kv else None,
        kv_cache_gb=total([r2(target_kv[0].kv_k) + r2(target_kv[0].kv_v)]) if target_kv else None,
        draft_kv_cache_tokens=draft_kv[0].kv_tokens if draft_kv else None,
        draft_kv_cache_gb=total([r2(draft_kv[0].kv_k) + r2(draft_kv[0].kv_v)]) if draft_kv else None,
        avail_after_kv_gb=r2(kv_before_graphs[-1].avail_after) if kv_before_graphs else None,
        graph_gb=total([s.usage for s in graphs if s.role == "target"]),
        draft_graph_gb=total([s.usage for s in graphs if s.role == "draft"]),
        avail_end_gb=r2(plan.final_avail) if failure is None else last_avail,
        max_total_num_tokens=plan.kv_tokens if failure is None else None,
    )


class Oracle:
    """Evaluates configurations of one spec on one simulated profile; results are cached per config."""

    def __init__(self, spec: SweepSpec, profile: SimProfile) -> None:
        self.spec = spec
        self.profile = profile
        self._parser = build_parser()
        # The spec's engine renders the flags, as it does for a trial's launch (SGLang's: the simulator's).
        self._engine = engine_for(spec.engine)
        self._cache: dict[ServerConfig, Evaluation] = {}

    @property
    def gpus(self) -> int:
        return self.spec.node.gpus

    def evaluate(self, config: ServerConfig) -> Evaluation:
        hit = self._cache.get(config)
        if hit is None:
            hit = self._cache[config] = self._evaluate(config)
        return hit

    def _args(self, config: ServerConfig) -> SimArgs:
        """The launch's flags as the trial renders them, resolved by SGLang's rules as the server does."""
        argv = [
            *self._engine.flags(
                TrialLaunch(
                    LaunchSettings.from_spec(self.spec),
                    config,
                    version=self.profile.sglang_version,
                    port=30000,
                    tp_size=self.gpus,
                    adaptive_config_path=adaptive.CONFIG_FILE,
                )
            ),
            "--sim-profile",
            self.profile.name,
            "--sim-state-dir",
            "/nonexistent",
        ]
        return resolve(self._parser.parse_args(argv), self.profile, explicit_dests(self._parser, argv))

    def _evaluate(self, config: ServerConfig) -> Evaluation:
        args = self._args(config)
        plan = plan_startup(self.profile, args)
        p = self.profile
        account = memory_account(plan)
        resolved = ResolvedLaunch(
            mem_fraction_static=args.mem_fraction_static,
            cuda_graph_max_bs=args.cuda_graph_max_bs,
            speculative_num_steps=args.speculative_num_steps,
            speculative_eagle_topk=args.speculative_eagle_topk,
            speculative_num_draft_tokens=args.speculative_num_draft_tokens,
        )
        startup = p.import_s + sum(s.real_s for s in plan.steps)
        if plan.failure is not None:
            f = plan.failure
            if f.kind in (OomKind.CAPTURE, OomKind.RAW_OOM) and f.name:
                startup += p.graph_capture_s_per_bs
            failure = Failure(f.stage, FailureKind.OOM, f"{f.kind.value}: {f.role} {f.name}".strip())
            return Evaluation(
                config, TrialStatus.OOM, failure, (), account, resolved, startup, 0.0, OOM_EXIT_S
            )
        resolved = replace(
            resolved,
            max_running_requests=plan.max_running_requests,
            effective_max_running_requests=plan.max_running_requests,
        )
        speed = SpeedModel.for_args(p, args, plan.capture_sizes)
        probs = (
            position_probs(p, speed.tree, broken=bool(broken_draft_reason(p, args)))
            if speed.tree is not None
            else []
        )
        accept = expected_accept_length(probs) if speed.tree is not None else 1.0
        model = _StageModel(
            speed, accept, plan.kv_tokens, plan.max_running_requests, args.chunked_prefill_size
        )
        wl = self.spec.workload
        startup += p.server_start_s + model.wave_s(1, min(wl.input_len, 6), SERVER_WARMUP_TOKENS)
        pre = 0.0
        if wl.warmup_prompts:
            pre += model.stage_s(
                wl.warmup_prompts, wl.warmup_prompts, min(wl.input_len, 64), min(wl.output_len, 16)
            )
        mrr = plan.max_running_requests
        demand = mrr * (wl.input_len + wl.output_len)
        if plan.kv_tokens < demand:
            per_step = speed.tree.draft_tokens if speed.tree is not None else 1
            pre += model.stage_s(mrr, mrr, wl.input_len, wl.output_len)
            if retracts(plan.kv_tokens, mrr, wl.input_len, wl.output_len, per_step, accept):
                failure = Failure(
                    FailureStage.UNDER_LOAD,
                    FailureKind.KV_PRESSURE,
                    f"kv_pressure: the KV pool holds {plan.kv_tokens} tokens, {demand} were asked for",
                )
                return Evaluation(
                    config, TrialStatus.KV_PRESSURE, failure, (), account, resolved, startup, pre, STOP_S
                )
        stages = tuple(model.stage(c, wl) for c in wl.concurrency)
        return Evaluation(
            config,
            TrialStatus.OK,
            None,
            stages,
            account,
            resolved,
            startup,
            pre,
            STOP_S,
            accept_length=accept if speed.tree is not None else None,
        )


@dataclass(frozen=True)
class _StageModel:
    """Steady-state timing of a stage: waves of the running batch, each a prefill then decode steps."""

    speed: SpeedModel
    accept: float
    pool: int
    max_running: int
    chunked_prefill: int

    def batch(self, concurrency: int, input_len: int, output_len: int) -> int:
        by_pool = max(1, int(self.pool // (input_len + INIT_NEW_TOKEN_RATIO * output_len)))
        return max(1, min(concurrency, self.max_running, by_pool))

    def wave_s(self, batch: int, input_len: int, output_len: int) -> float:
        tokens = batch * input_len
        chunks = max(1, math.ceil(tokens / max(1, self.chunked_prefill)))
        prefill = self.speed.prefill_time(tokens) + (chunks - 1) * self.speed.prefill_time(0)
        steps = max(0, output_len - 1) / self.accept
        return prefill + steps * self.speed.step_time(batch)

    def stage_s(self, requests: int, concurrency: int, input_len: int, output_len: int) -> float:
        batch = self.batch(concurrency, input_len, output_len)
        full, rest = divmod(requests, batch)
        total = full * self.wave_s(batch, input_len, output_len)
        return total + (self.wave_s(rest, input_len, output_len) if rest else 0.0)

    def stage(self, concurrency: int, wl: WorkloadSpec) -> StageMetrics:
        n, lin, lout = wl.num_prompts, wl.input_len, wl.output_len
        batch = self.batch(concurrency, lin, lout)
        duration = self.stage_s(n, concurrency, lin, lout)
        step = self.speed.step_time(batch)
        prefill = self.speed.prefill_time(batch * lin)
        waves = math.ceil(n / batch)
        wave = self.wave_s(batch, lin, lout)
        # The client sends the prompts again until the stage lasts `min_stage_s` and holds
        # `min_stage_tokens`, and reads a steady window where the stage has one: on the H200, s3k1d4 at 32
        # ran 192 requests (6 waves) and was steady, s4k4d16 at 32 its 96 (3 waves, 11.5 s) and was not.
        view = client_view(
            prompts=n,
            concurrency=concurrency,
            batch=batch,
            output_len=lout,
            wave_s=lambda k: self.wave_s(k, lin, lout),
            prefill_s=lambda k: self.speed.prefill_time(k * lin),
            min_stage_s=wl.min_stage_s,
            min_stage_tokens=wl.min_stage_tokens,
        )
        return StageMetrics(
            concurrency=concurrency,
            num_requests=n,
            completed=n,
            failed=0,
            duration_s=duration,
            output_tok_per_s=view.tok_per_s if view.window.steady else n * lout / duration,
            request_per_s=n / duration,
            ttft_p50_ms=1000.0 * (prefill + wave * (waves - 1) / 2),
            ttft_p99_ms=1000.0 * (prefill + wave * (waves - 1)),
            itl_p50_ms=1000.0 * step / self.accept,
            itl_p99_ms=1000.0 * step,
            tpot_p50_ms=1000.0 * step / self.accept,
            accept_length=self.accept if self.speed.tree is not None else None,
            window_s=view.window.length_s if view.window.steady else duration,
            steady=view.window.steady,
        )
