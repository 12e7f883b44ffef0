"""What an engine's log reader reports: plain frozen records, free of any parsing logic.

Every engine's `engines.engine.LogReader` reports a `LogReport`, so that everything that reads one (the
trial, the KV probe, the memory prior's log shift) depends on these shapes only, never on one engine's
parser. The figures are those of any GPU server's start-up: weights loaded, KV pools allocated, CUDA
graphs captured, each tensor-parallel rank's own; what the server says it resolved for the values the
sweep sets is the engine's own record (`ResolvedArgs`: SGLang's is
`engines.sglang.server_args.SglangServerArgs`).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Generic, Protocol, TypeVar

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


@dataclass(frozen=True)
class RankFigures:
    """What one TP rank printed, GB per GPU: target first, then the draft, as the server loads them."""

    rank: int
    avail_at_start_gb: float | None = None
    weights_gb: tuple[float, ...] = ()  # the usage of each weight load
    kv_cache_tokens: tuple[int, ...] = ()  # the tokens of each KV pool
    avail_end_gb: float | None = None  # what was left once start-up was done
    lines: int = 0


class ResolvedArgs(Protocol):
    """What a server's log says it settled on for the values the sweep sets (under their names in
    `config.fields.SearchedField`); None where the log did not say."""

    @property
    def mem_fraction_static(self) -> float | None: ...
    @property
    def cuda_graph_max_bs(self) -> int | None: ...
    @property
    def max_running_requests(self) -> int | None: ...
    @property
    def speculative_num_steps(self) -> int | None: ...
    @property
    def speculative_eagle_topk(self) -> int | None: ...
    @property
    def speculative_num_draft_tokens(self) -> int | None: ...
    @property
    def tp_size(self) -> int | None: ...
    @property
    def effective_max_running_requests(self) -> int | None:
        """How many requests the server will really run at once (its KV pool may hold fewer)."""
        ...

    def launch_values(self) -> ResolvedLaunch:
        """The record a trial's result carries (`records.ResolvedLaunch`)."""
        ...


Args_co = TypeVar("Args_co", bound=ResolvedArgs, covariant=True)


@dataclass(frozen=True)
class LogReport(Generic[Args_co]):
    """What a log has shown so far. Generic in the engine's own resolved arguments (``args``): SGLang's
    reader reports a `LogReport[SglangServerArgs]`, which reads as a `LogReport[ResolvedArgs]` anywhere
    else."""

    ready: bool
    failure: Failure | None
    memory: MemoryAccount
    args: Args_co | None
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
