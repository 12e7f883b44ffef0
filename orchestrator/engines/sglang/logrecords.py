"""What the log parser reports: plain frozen records, free of any parsing logic.

Split from `logparse` so that everything that reads a report (the trial, the memory model, the report
page) depends on the shapes only.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum

from orchestrator.engines.sglang.ranks import RankFigures
from orchestrator.records import Failure, FailureStage, MemoryAccount, ResolvedLaunch


class LogEvent(StrEnum):
    """What a fed line changed."""

    NONE = "none"
    READY = "ready"
    FAILED = "failed"


@dataclass(frozen=True)
class WeightLoad:
    model_class: str
    avail_before_gb: float | None
    avail_after_gb: float
    usage_gb: float
    elapsed_s: float | None
    dtype: str | None = None  # `dtype=` (<= 0.5.9) or the quantization string (0.5.14+), as printed
    is_draft: bool = False


@dataclass(frozen=True)
class KvAllocation:
    tokens: int
    size_gb: float  # K+V, or the MLA `KV size`
    dtype: str | None = None
    label: str = ""  # a hybrid pool's own name ("Full", "SWA"), empty for a plain pool
    virtual: bool = False  # 0.5.23 `VA upper bound`: address space reserved, counted as allocated
    is_draft: bool = False


@dataclass(frozen=True)
class GraphCapture:
    name: str  # "target", "target prefill", "target verify", "draft", "draft decode", "draft extend", ...
    is_draft: bool
    avail_before_gb: float | None
    usage_gb: float | None
    avail_after_gb: float | None
    elapsed_s: float | None
    batch_sizes: tuple[int, ...]
    num_tokens: tuple[int, ...] = ()  # prefill graphs are captured per token count, not per batch size
    backend: str | None = None
    finished: bool = False  # its `end` line was seen


def total_gb(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return round(sum(present), 2) if present else None


@dataclass(frozen=True)
class SglangServerArgs:
    """SGLang's own view of the launch: its `server_args=` line plus the lines that override it later;
    `launch_values` maps it to the engine-neutral `records.ResolvedLaunch` a trial's record carries."""

    mem_fraction_static: float | None = None
    cuda_graph_max_bs: int | None = None
    max_running_requests: int | None = None
    speculative_algorithm: str | None = None
    speculative_num_steps: int | None = None
    speculative_eagle_topk: int | None = None
    speculative_num_draft_tokens: int | None = None
    tp_size: int | None = None
    max_running_requests_reset_to: int | None = None  # "Max running requests is reset to 48 ..."
    effective_max_running_requests: int | None = None  # from the max_total_num_tokens=... line
    raw: dict[str, str] = field(default_factory=dict)  # every top-level key of the line, value as printed
    cuda_graph_bs: tuple[int, ...] = ()
    disable_cuda_graph: bool | None = None
    context_len: int | None = None  # from the max_total_num_tokens=... line

    def launch_values(self) -> ResolvedLaunch:
        """What SGLang settled on for the launch values the sweep sets (those printed), for the record."""
        return ResolvedLaunch(
            mem_fraction_static=self.mem_fraction_static,
            cuda_graph_max_bs=self.cuda_graph_max_bs,
            max_running_requests=self.max_running_requests,
            effective_max_running_requests=self.effective_max_running_requests,
            max_running_requests_reset_to=self.max_running_requests_reset_to,
        )

    def as_params(self) -> dict[str, float | int | str | bool]:
        """The typed values that are set (``raw`` and the batch-size list left out), for MLflow."""
        return {
            k: v
            for k, v in self.__dict__.items()
            if v is not None and isinstance(v, float | int | str | bool) and k != "raw"
        }


@dataclass(frozen=True)
class LogReport:
    ready: bool
    failure: Failure | None
    memory: MemoryAccount
    args: SglangServerArgs | None
    weight_loads: tuple[WeightLoad, ...]
    kv_allocations: tuple[KvAllocation, ...]
    graphs: tuple[GraphCapture, ...]
    decode_accept_lens: tuple[float, ...]
    retractions: int  # requests retracted (the sum of #retracted_reqs; one per line where absent)
    runtime_oom: bool
    error_line_at: float | None  # the `now` given with the line where the failure began
    port_in_use: bool
    last_stage: FailureStage  # where the server was at the end; for a failed one, its failure's stage
    decode_gen_throughputs: tuple[float, ...] = ()  # `gen throughput (token/s)` of each Decode batch line
    retraction_lines: int = 0
    nonfatal_errors: tuple[str, ...] = ()  # exception lines after ready that did not stop the server
    ready_at: float | None = None
    ranks: tuple[RankFigures, ...] = ()  # each TP rank's own figures (empty on one GPU: no rank tags)
    failed_rank: int | None = None  # the TP rank whose error came first; None: the launcher, or untagged
    adaptive_switches: tuple[tuple[int, int], ...] = ()  # (from, to) steps of each run-time tier change


# --- the parser -------------------------------------------------------------------------------
