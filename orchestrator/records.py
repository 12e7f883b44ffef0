"""Records and enums that cross a process or Ray boundary.

Everything here is a frozen dataclass or an enum so that a trial's outcome can be pickled by Ray,
logged to MLflow and compared in tests without any of the code that produced it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from enum import StrEnum
from typing import Any


class TrialStatus(StrEnum):
    """What became of a trial, as the MLflow ``status`` tag shows it."""

    OK = "ok"
    OOM = "oom"  # the server ran out of GPU memory at start-up (KV allocation or graph capture)
    PREDICTED_OOM = "predicted_oom"  # skipped: the learned memory model says it cannot fit
    KV_PRESSURE = "kv_pressure"  # started, but retracts requests at its own max_running_requests
    OOM_UNDER_LOAD = "oom_under_load"  # started, then an out-of-memory line under load (a bare crash: FAILED)
    SLA_MISSED = "sla_missed"  # ran, but no benchmark stage met the spec's latency limits
    FAILED = "failed"  # crash or any other error that says nothing about memory
    TIMEOUT = "timeout"  # a phase ran past its deadline (never ready, or hung mid-benchmark)
    LOST = "lost"  # the node or the worker died under the trial
    # The driver stopped under it (Ctrl-C, SIGTERM, or killed and found dead by the next driver): nothing
    # was measured, so like a lost launch it costs no budget and its configuration is queued again; unlike
    # a lost one it still shows, as this status, in the console's table, in MLflow (a KILLED run) and in
    # Optuna (FAIL), so that no launch vanishes.
    INTERRUPTED = "interrupted"

    @property
    def free(self) -> bool:
        """Statuses that cost no launch of the budget: never launched, or nothing measured."""
        return self in {TrialStatus.PREDICTED_OOM, TrialStatus.LOST, TrialStatus.INTERRUPTED}

    @property
    def infeasible(self) -> bool:
        """Statuses the study learns as a violated memory constraint (Optuna PRUNED)."""
        return self in {
            TrialStatus.OOM,
            TrialStatus.PREDICTED_OOM,
            TrialStatus.KV_PRESSURE,
            TrialStatus.OOM_UNDER_LOAD,
        }


class FailureStage(StrEnum):
    """Where in a server's life a failure happened."""

    GPU_CHECK = "gpu_check"
    LAUNCH = "launch"
    WEIGHT_LOADING = "weight_loading"
    KV_ALLOCATION = "kv_allocation"
    TARGET_GRAPH_CAPTURE = "target_graph_capture"
    DRAFT_GRAPH_CAPTURE = "draft_graph_capture"
    WARMUP = "warmup"
    UNDER_LOAD = "under_load"
    SHUTDOWN = "shutdown"


class FailureKind(StrEnum):
    """Why it failed."""

    OOM = "oom"
    CRASH = "crash"
    TIMEOUT = "timeout"
    HANG = "hang"  # an error line, then no exit (e.g. port in use): killed by SIGKILL of the group
    PORT_IN_USE = "port_in_use"
    GPU_NOT_CLEAN = "gpu_not_clean"
    NODE_LOST = "node_lost"
    KV_PRESSURE = "kv_pressure"
    BENCHMARK_ERROR = "benchmark_error"
    INTERNAL_ERROR = "internal_error"  # specsweep's own trial code raised: a bug to report
    INTERRUPTED = "interrupted"  # the driver stopped while the trial ran


def fraction_text(fraction: float) -> str:
    """A fraction as the console and the labels print it: 3 decimals, more where 3 would round a fraction
    inside (0, 1) to 0.000 or 1.000 (--fraction 0.9999 prints 0.9999, not 1.000)."""
    text = f"{fraction:.3f}"
    digits = 3
    while 0 < fraction < 1 and float(text) in (0.0, 1.0) and digits < 12:
        digits += 1
        text = f"{fraction:.{digits}f}"
    return text


@dataclass(frozen=True)
class ServerConfig:
    """One point of the search space: the values a trial passes as SGLang flags.

    ``speculative_num_steps`` is None for a baseline trial without speculation; otherwise the three
    speculative values are always set together, as SGLang requires.
    """

    mem_fraction_static: float
    cuda_graph_max_bs: int
    max_running_requests: int
    speculative_num_steps: int | None = None
    speculative_eagle_topk: int | None = None
    speculative_num_draft_tokens: int | None = None
    speculative_adaptive: str | None = None  # "default" or "tiers" (orchestrator.config.adaptive); None = off
    # The engine's own searched values, those its space declares beyond the fields above (the spec's
    # `search.engine`), by name in name order; () for SGLang, whose every searched value is a field.
    engine_values: tuple[tuple[str, float], ...] = ()

    @property
    def speculative(self) -> bool:
        return self.speculative_num_steps is not None

    def engine_value(self, name: str) -> float | None:
        """One of the engine's own values; None when this configuration has none of that name."""
        return next((value for key, value in self.engine_values if key == name), None)

    def label(self) -> str:
        """Short human name, used as the Ray task name and in tables."""
        spec = " nospec"
        if self.speculative:
            spec = (
                f" s{self.speculative_num_steps}"
                f"k{self.speculative_eagle_topk}d{self.speculative_num_draft_tokens}"
            )
        if self.speculative_adaptive:
            spec += f" adaptive-{self.speculative_adaptive}"
        base = f"mf{fraction_text(self.mem_fraction_static)} gbs{self.cuda_graph_max_bs}"
        own = "".join(f" {name}={value:g}" for name, value in self.engine_values)
        return f"{base} mrr{self.max_running_requests}{spec}{own}"


@dataclass(frozen=True)
class GpuProcess:
    pid: int
    used_mib: float
    name: str = ""


@dataclass(frozen=True)
class GpuSample:
    """One GPU as NVML (real or fake) sees it."""

    index: int
    total_mib: float
    used_mib: float
    processes: tuple[GpuProcess, ...] = ()
    # NVML's UUID: the same physical GPU whichever Ray node (a new id at each Ray start) saw it; "" in
    # records written before it was kept.
    uuid: str = ""


def machine_of(samples: tuple[GpuSample, ...] | list[GpuSample]) -> str:
    """The machine these GPUs are: their NVML UUIDs, sorted and joined ("" where none was read). Ray gives
    a node a new id at each start; the GPUs keep theirs."""
    return ",".join(sorted(g.uuid for g in samples if g.uuid))


@dataclass(frozen=True)
class Failure:
    """A classified failure: the stage, the kind, and the server's own words."""

    stage: FailureStage
    kind: FailureKind
    message: str
    detail: str = ""

    @property
    def is_oom(self) -> bool:
        return self.kind is FailureKind.OOM


@dataclass(frozen=True)
class DatasetMetrics:
    """One dataset's requests within a stage: its acceptance and its share of the stage's tok/s."""

    name: str
    num_requests: int
    completed: int
    output_tok_per_s: float  # this dataset's output tokens / the stage's duration
    accept_length: float | None
    tpot_p50_ms: float


@dataclass(frozen=True)
class StageMetrics:
    """One benchmark stage (one concurrency level), computed as SGLang's bench_serving does."""

    concurrency: int
    num_requests: int
    completed: int
    failed: int
    duration_s: float
    output_tok_per_s: float
    request_per_s: float
    ttft_p50_ms: float
    ttft_p99_ms: float
    itl_p50_ms: float
    itl_p99_ms: float
    tpot_p50_ms: float
    accept_length: float | None  # sum(completion_tokens) / sum(spec_verify_ct) over the requests
    retractions: int = 0
    errors: tuple[str, ...] = ()
    # output_tok_per_s is measured over this window: the steady part of the stage, or the whole stage
    # (steady False) when it had none long enough.
    window_s: float = 0.0
    steady: bool = False
    output_tok_per_s_ci95: tuple[float, float] | None = None  # 95 % batch-means; None: no steady window
    by_dataset: tuple[DatasetMetrics, ...] = ()


@dataclass(frozen=True)
class MemoryAccount:
    """GB per GPU as the log prints them; a failed start has only the part it reached."""

    avail_at_start_gb: float | None = None
    weights_gb: float | None = None
    draft_weights_gb: float | None = None
    avail_after_weights_gb: float | None = None
    kv_cache_tokens: int | None = None
    kv_cache_gb: float | None = None
    draft_kv_cache_tokens: int | None = None
    draft_kv_cache_gb: float | None = None
    avail_after_kv_gb: float | None = None
    graph_gb: float | None = None
    draft_graph_gb: float | None = None
    avail_end_gb: float | None = None
    max_total_num_tokens: int | None = None

    def as_metrics(self) -> dict[str, float]:
        """The figures that are known, as numbers under the field names (MLflow metrics, JSON)."""
        return {k: float(v) for k, v in self.__dict__.items() if v is not None}

    @classmethod
    def from_metrics(cls, metrics: Mapping[str, float]) -> MemoryAccount:
        """The account back from `as_metrics` (or from a run's metrics: other names are left out).
        Token counts (the ``*_tokens`` fields) come back as ints, the rest as GB."""
        known = {f.name: metrics.get(f.name) for f in fields(cls)}
        values: dict[str, Any] = {
            k: int(v) if k.endswith("_tokens") else float(v) for k, v in known.items() if v is not None
        }
        return cls(**values)


@dataclass(frozen=True)
class ResolvedLaunch:
    """The launch values the sweep sets, as SGLang settled on them (its log); None where not printed.

    They may differ from the configuration asked (`TrialResult.config`): SGLang adjusts the draft tokens to
    steps + 1 under top-k 1, picks its own tree when none is given, resets the running requests under
    speculation. The record keeps both, so a result says which server actually ran."""

    mem_fraction_static: float | None = None
    cuda_graph_max_bs: int | None = None
    max_running_requests: int | None = None
    effective_max_running_requests: int | None = None  # from the max_total_num_tokens=... line
    max_running_requests_reset_to: int | None = None  # "Max running requests is reset to 48 ..."
    speculative_num_steps: int | None = None
    speculative_eagle_topk: int | None = None
    speculative_num_draft_tokens: int | None = None

    def as_dict(self) -> dict[str, float | int]:
        """The values that are set, under the field names (MLflow metrics, JSON)."""
        return {k: v for k, v in self.__dict__.items() if v is not None}


@dataclass(frozen=True)
class Margin:
    """One greedy output position's two best tokens as the server scored them: how far the chosen
    token's log-probability led (nats) and the token that came second."""

    nats: float
    runner_up: int


@dataclass(frozen=True)
class TrialResult:
    """Everything a trial sends back to the driver. The driver alone writes MLflow and Optuna."""

    config: ServerConfig
    status: TrialStatus
    node_id: str
    command: tuple[str, ...]
    startup_s: float | None = None
    failure: Failure | None = None
    stages: tuple[StageMetrics, ...] = ()
    server_accept_length: float | None = None  # /get_server_info after /flush_cache
    memory: MemoryAccount = field(default_factory=MemoryAccount)  # the memory account read from the log
    resolved_args: ResolvedLaunch = field(default_factory=ResolvedLaunch)
    server_version: str = ""
    log_path: str = ""
    log_text: str = ""  # the whole server log (its head and tail when over trial_log.LOG_LIMIT)
    oom_to_clean_s: float | None = None  # from the OOM line to the GPUs reported clean
    gpu_before: tuple[GpuSample, ...] = ()
    gpu_after: tuple[GpuSample, ...] = ()
    wall_s: float = 0.0
    started_unix: float = 0.0  # wall-clock span on the node, to show placement (one trial per node)
    finished_unix: float = 0.0
    notes: tuple[str, ...] = ()
    dataset: str = ""  # the workload's datasets and weights, as one line
    adaptive_config: str = ""  # the --speculative-adaptive-config file it launched with (JSON)
    adaptive_switches: int = 0  # times the server changed its speculative steps at run time (adaptive)
    greedy_outputs: tuple[tuple[int, ...], ...] = ()  # the lossless check's outputs (budget.baseline)
    # Per prompt, per output position, the top-two margin (None: the engine gave none; () for a prompt:
    # no logprobs at all), so that a late trial can be judged with the baseline's margins on --resume.
    greedy_margins: tuple[tuple[Margin | None, ...], ...] = ()
    # A configuration the memory model ruled out: its predicted figures (never launched, so no log).
    predicted: dict[str, float] = field(default_factory=dict)

    @property
    def best_stage(self) -> StageMetrics | None:
        ok = [s for s in self.stages if s.completed > 0]
        return max(ok, key=lambda s: s.output_tok_per_s) if ok else None

    @property
    def output_tok_per_s(self) -> float | None:
        best = self.best_stage
        return best.output_tok_per_s if best else None

    @property
    def accept_length(self) -> float | None:
        """The trial's acceptance length: its best stage's, else the server's own average.

        The one rule for it: the record, the diagnosis and the tables all read it from here."""
        best = self.best_stage
        if best is not None and best.accept_length is not None:
            return best.accept_length
        return self.server_accept_length

    def table_figures(self) -> dict[str, float | None]:
        """The figures the end-of-run table shows besides tok/s, under the names the study stores."""
        best = self.best_stage
        return {
            "accept_length": self.accept_length,
            "ttft_p99_ms": best.ttft_p99_ms if best else None,
            "itl_p99_ms": best.itl_p99_ms if best else None,
            "kv_cache_tokens": _float(self.memory.kv_cache_tokens),
        }


def _float(value: int | None) -> float | None:
    return None if value is None else float(value)


@dataclass(frozen=True)
class TrialRecord:
    """One settled trial as the driver keeps it (its journal, its MLflow run, the answer's ranking): the
    node's `TrialResult` plus what only the driver knows."""

    number: int
    result: TrialResult
    objective: float | None
    speedup_vs_baseline: float | None = None
    diagnosis: str = ""
    baseline: bool = False
    extra_tags: tuple[tuple[str, str], ...] = ()  # (MLflow tag name, text): `mlflow_schema.names.Tag`

    def tag(self, name: str) -> str | None:
        """The text of an extra tag (`name`: a `mlflow_schema.names.Tag`), or None."""
        return dict(self.extra_tags).get(name)
