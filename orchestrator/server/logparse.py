"""Reads an SGLang server log (0.5.5 to 0.5.23) into a start-up memory account and a classified failure.

The parser is fed one line at a time while a live log is followed, so that the caller learns of
readiness or of a failure on the very line that shows it; ``parse_log`` runs the same code on a whole
file. Line shapes were read off the SGLang sources of each version and checked against real 0.5.17
logs from an H200, which win where the two disagree.

Only the first rank's lines (``TP0``, or no rank tag on one GPU) feed the memory account: with tp > 1
every rank prints the same lines and the figures are per GPU anyway; each rank's own figures are kept
beside it (`ranks`). A failure is taken from any rank, because the rank that dies first is not always
rank 0, and the report names that rank.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field

from orchestrator.records import Failure, FailureKind, FailureStage
from orchestrator.server import pyrepr
from orchestrator.server import sglang_lines as shapes
from orchestrator.server.logrecords import (
    GraphCapture,
    KvAllocation,
    LogEvent,
    LogReport,
    MemoryAccount,
    ResolvedArgs,
    WeightLoad,
    total_gb,
)
from orchestrator.server.pyrepr import parse_mapping, parse_server_args
from orchestrator.server.ranks import RANK_DIED, RankFigureReader, tp_rank

__all__ = [
    "GraphCapture",
    "KvAllocation",
    "LogEvent",
    "LogParser",
    "LogReport",
    "MemoryAccount",
    "ResolvedArgs",
    "WeightLoad",
    "parse_log",
    "parse_mapping",
    "parse_server_args",
]

log = logging.getLogger(__name__)

_GRAPH_STAGES = (FailureStage.TARGET_GRAPH_CAPTURE, FailureStage.DRAFT_GRAPH_CAPTURE)
_BEFORE_GRAPHS = (FailureStage.LAUNCH, FailureStage.WEIGHT_LOADING, FailureStage.KV_ALLOCATION)


@dataclass
class _Traceback:
    fatal: bool  # opened by a scheduler's exception or before ready: the server is going down
    started_at: float | None
    opener: str
    rank: int | None = None  # the TP rank that printed it; None for the launcher's own
    frames: list[str] = field(default_factory=list)  # "path:function" of every frame
    exceptions: list[str] = field(default_factory=list)


@dataclass
class _Pending:
    """A graph capture whose `begin` line was seen."""

    name: str
    avail_before_gb: float | None
    batch_sizes: tuple[int, ...]
    num_tokens: tuple[int, ...]
    backend: str | None


class LogParser:
    """Incremental: fed line by line while following a live log file; also used on a whole file."""

    def __init__(self) -> None:
        self._stage = FailureStage.LAUNCH
        self._ready = False
        self._ready_at: float | None = None
        self._shutting_down = False
        self._failure: Failure | None = None
        self._failure_tb: _Traceback | None = None
        self._error_line_at: float | None = None
        self._runtime_oom = False
        self._port_in_use = False
        self._tb: _Traceback | None = None
        self._raw_args: dict[str, str] | None = None
        self._reset_to: int | None = None
        self._effective_mrr: int | None = None
        self._context_len: int | None = None
        self._weight_begin: float | None = None
        self._weights: list[WeightLoad] = []
        self._kv: list[KvAllocation] = []
        self._kv_groups: list[list[KvAllocation]] = [[]]  # closed by each `Memory pool end`
        self._avail_after_kv: float | None = None
        self._avail_after_weights: float | None = None
        self._graphs: list[GraphCapture] = []
        self._pending: dict[str, _Pending] = {}
        self._max_total: int | None = None
        self._avail_end: float | None = None
        self._last_avail: float | None = None
        self._accept: list[float] = []
        self._gen_tput: list[float] = []
        self._retracted = 0
        self._retract_lines = 0
        self._nonfatal: list[str] = []
        self._ranks = RankFigureReader()
        self._line_rank: int | None = None  # rank of the last tagged line: its traceback follows it
        self._failed_rank: int | None = None

    # -- public ---------------------------------------------------------------------------------

    def feed(self, line: str, now: float | None = None) -> LogEvent:
        """Take one line (a trailing newline is fine); ``now`` is the monotonic time it was read."""
        event = LogEvent.NONE
        for part in shapes.ANSI.sub("", line).rstrip("\r\n").split("\r"):
            for piece in shapes.EMBEDDED_PREFIX.split(part):
                got = self._feed_one(piece.rstrip(), now)
                if got is LogEvent.FAILED or (got is LogEvent.READY and event is LogEvent.NONE):
                    event = got
        return event

    def finish(self, now: float | None = None) -> LogEvent:
        """The log ended (the process exited): settle a traceback that was still open."""
        return self._close_traceback(now)

    def report(self) -> LogReport:
        args = None
        if self._raw_args is not None or self._reset_to is not None or self._effective_mrr is not None:
            args = self._resolved_args(self._raw_args or {})
        graphs = [*self._graphs, *(self._unfinished(p) for p in self._pending.values())]
        return LogReport(
            ready=self._ready,
            failure=self._failure,
            memory=self._memory(),
            args=args,
            weight_loads=tuple(self._weights),
            kv_allocations=tuple(self._kv),
            graphs=tuple(graphs),
            decode_accept_lens=tuple(self._accept),
            retractions=self._retracted,
            runtime_oom=self._runtime_oom,
            error_line_at=self._error_line_at,
            port_in_use=self._port_in_use,
            last_stage=self._failure.stage if self._failure is not None else self._stage,
            decode_gen_throughputs=tuple(self._gen_tput),
            retraction_lines=self._retract_lines,
            nonfatal_errors=tuple(self._nonfatal),
            ready_at=self._ready_at,
            ranks=self._ranks.figures(),
            failed_rank=self._failed_rank,
        )

    # -- lines ----------------------------------------------------------------------------------

    def _feed_one(self, text: str, now: float | None) -> LogEvent:
        m = shapes.PREFIX.match(text)
        if m is None:
            return self._unprefixed(text, now)
        event = self._close_traceback(now)
        tags = dict(shapes.TAG.findall(m.group("tags") or m.group("bare") or ""))
        msg = text[m.end() :]
        primary = all(v == "0" for v in tags.values())
        self._line_rank = tp_rank(tags)
        if self._line_rank is not None:
            self._ranks.feed(self._line_rank, msg)
        if shapes.TRACEBACK in msg:
            self._tb = _Traceback(
                fatal=not self._ready or "Scheduler hit an exception" in msg,
                started_at=now,
                opener=msg,
                rank=self._line_rank,
            )
        if primary:
            self._account(msg)
        elif tags.get("TP", "0") == "0":
            self._runtime_stats(msg)  # another DP rank's TP0 serves its own requests
        return self._worse(event, self._prefixed_event(msg, now))

    def _unprefixed(self, text: str, now: float | None) -> LogEvent:
        if shapes.TRACEBACK in text:
            if self._tb is None:  # an uncaught exception, printed by the interpreter itself
                self._line_rank = None
                self._tb = _Traceback(fatal=not self._ready, started_at=now, opener=text)
            return LogEvent.NONE
        if self._tb is not None:
            frame = shapes.FRAME.match(text)
            if frame:
                self._tb.frames.append(f"{frame.group('path')}:{frame.group('func')}")
            elif shapes.EXC_LINE.match(text):
                self._tb.exceptions.append(text)
                return self._exception(text, self._tb, now)
            return LogEvent.NONE
        if shapes.TRY_TOKENS.match(text) and self._failure is not None and not self._failure.detail:
            self._failure = Failure(self._failure.stage, self._failure.kind, self._failure.message, text)
            return LogEvent.NONE
        if shapes.PORT.search(text):
            return self._fail(self._stage, FailureKind.PORT_IN_USE, text, now, port=True)
        if shapes.ARGPARSE_ERROR.match(text):
            return self._fail(self._stage, FailureKind.CRASH, text, now)
        return LogEvent.NONE

    def _prefixed_event(self, msg: str, now: float | None) -> LogEvent:
        if shapes.READY in msg:
            first = not self._ready
            self._ready, self._stage = True, FailureStage.UNDER_LOAD
            if first:
                self._ready_at = now
            return LogEvent.READY if first else LogEvent.NONE
        if shapes.SHUTDOWN.search(msg):
            self._shutting_down = True
            return LogEvent.NONE
        if shapes.RETRACT.search(msg) or "#retracted_reqs" in msg:
            return LogEvent.NONE  # a retraction is load, not a failure (counted in _runtime_stats)
        if shapes.KV_OOM.search(msg):
            return self._fail(FailureStage.KV_ALLOCATION, FailureKind.OOM, msg, now)
        if shapes.RUNTIME_OOM.search(msg):
            return self._fail(FailureStage.UNDER_LOAD, FailureKind.OOM, msg, now, runtime=True)
        if shapes.PORT.search(msg):
            return self._fail(self._stage, FailureKind.PORT_IN_USE, msg, now, port=True)
        if shapes.FATAL_LINE.search(msg) and not self._shutting_down:
            # The launcher's echo of a child's death: the cause, if logged, came first.
            message = self._nonfatal[-1] if self._ready and self._nonfatal else msg
            return self._fail(self._stage, FailureKind.CRASH, message, now)
        return LogEvent.NONE

    def _account(self, msg: str) -> None:
        """Rank 0's start-up lines: the memory account, the resolved arguments and the stage."""
        if m := shapes.WEIGHT_BEGIN.match(msg):
            self._weight_begin = self._avail(float(m.group(1)))
            self._stage = FailureStage.WEIGHT_LOADING
        elif m := shapes.WEIGHT_END.match(msg):
            mid = m.group("mid").strip(", ")
            dtype = mid.removeprefix("dtype=") or None
            cls = m.group("cls")
            after = self._avail(float(m.group("after")))
            draft = bool(self._weights)  # the target always loads first, in every version
            elapsed = float(m.group("elapsed")) if m.group("elapsed") else None
            self._weights.append(
                WeightLoad(cls, self._weight_begin, after, float(m.group("usage")), elapsed, dtype, draft)
            )
            if not self._kv:
                self._avail_after_weights = after
            self._weight_begin = None
            self._stage = FailureStage.KV_ALLOCATION
        elif m := shapes.KV.match(msg):
            size = float(m.group("kv")) if m.group("kv") else float(m.group("k")) + float(m.group("v"))
            alloc = KvAllocation(
                int(m.group("tokens")),
                round(size, 2),
                m.group("dtype"),
                m.group("label") or "",
                m.group("how") == "VA upper bound",
                is_draft=len(self._kv_groups) > 1,
            )
            self._kv.append(alloc)
            self._kv_groups[-1].append(alloc)
            self._stage = FailureStage.KV_ALLOCATION
        elif m := shapes.POOL_END.match(msg):
            avail = self._avail(float(m.group(1)))
            if not self._graphs and not self._pending:
                self._avail_after_kv = avail
            if self._kv_groups[-1]:
                self._kv_groups.append([])
            self._stage = FailureStage.KV_ALLOCATION
        elif m := shapes.CAPTURE.match(msg):
            self._capture(m)
        elif m := shapes.ADAPTIVE_STATE.match(msg):
            # --speculative-adaptive: each extra tier is one more set of draft CUDA graphs.
            steps, elapsed, mem = int(m.group(1)), float(m.group(2)), float(m.group(3))
            self._graphs.append(
                GraphCapture(f"adaptive steps={steps}", True, None, mem, None, elapsed, (), finished=True)
            )
        elif m := shapes.MAX_TOTAL.match(msg):
            values = dict(shapes.KEYVAL_INT.findall(msg))
            self._max_total = int(m.group(1))
            self._effective_mrr = (
                int(values["max_running_requests"]) if "max_running_requests" in values else None
            )
            self._context_len = int(values["context_len"]) if "context_len" in values else None
            if g := shapes.AVAILABLE_GPU_MEM.search(msg):
                self._avail_end = self._avail(float(g.group(1)))
            if self._stage is not FailureStage.UNDER_LOAD:
                self._stage = FailureStage.WARMUP
        elif m := shapes.RESET.search(msg):
            self._reset_to = int(m.group(1))
        elif "server_args=" in msg and self._raw_args is None:
            self._raw_args = pyrepr.parse_server_args(msg)
        else:
            self._runtime_stats(msg)

    def _runtime_stats(self, msg: str) -> None:
        if shapes.DECODE.match(msg):
            if a := shapes.ACCEPT.search(msg):
                self._accept.append(float(a.group(1)))
            if t := shapes.GEN_TPUT.search(msg):
                self._gen_tput.append(float(t.group(1)))
        elif shapes.RETRACT.search(msg):
            self._retract_lines += 1
            n = shapes.RETRACTED.search(msg)
            self._retracted += int(n.group(1)) if n else 1

    def _capture(self, m: re.Match[str]) -> None:
        name = m.group("name").strip()
        if "draft" not in name.lower() and not name.lower().startswith("target"):
            name = f"target {name}".strip()
        rest = m.group("rest")
        avail = shapes.AVAIL.search(rest)
        avail_gb = self._avail(float(avail.group(1))) if avail else None
        is_draft = "draft" in name.lower()
        bs = shapes.BS.search(rest)
        num_tokens = shapes.NUM_TOKENS.search(rest)
        if m.group("phase") == "begin":
            backend = shapes.BACKEND.search(rest)
            self._pending[name] = _Pending(
                name,
                avail_gb,
                pyrepr.ints(bs.group(1)) if bs else (),
                pyrepr.ints(num_tokens.group(1)) if num_tokens else (),
                backend.group(1) if backend else None,
            )
            self._stage = FailureStage.DRAFT_GRAPH_CAPTURE if is_draft else FailureStage.TARGET_GRAPH_CAPTURE
            return
        began = self._pending.pop(name, None) or _Pending(name, None, (), (), None)
        usage = shapes.USAGE.search(rest)
        usage_gb = float(usage.group(1)) if usage else None
        if usage_gb is None and began.avail_before_gb is not None and avail_gb is not None:
            usage_gb = round(began.avail_before_gb - avail_gb, 2)
        elapsed = shapes.ELAPSED.search(rest)
        self._graphs.append(
            GraphCapture(
                name,
                is_draft,
                began.avail_before_gb,
                usage_gb,
                avail_gb,
                float(elapsed.group(1)) if elapsed else None,
                pyrepr.ints(bs.group(1)) if bs else began.batch_sizes,
                began.num_tokens,
                began.backend,
                finished=True,
            )
        )

    def _avail(self, gb: float) -> float:
        self._last_avail = gb
        return gb

    # -- failures -------------------------------------------------------------------------------

    def _close_traceback(self, now: float | None) -> LogEvent:
        """A traceback ends at the next prefixed line (or the end of the log)."""
        tb, self._tb = self._tb, None
        if tb is None or tb.exceptions or not tb.fatal or self._shutting_down:
            return LogEvent.NONE
        at = tb.started_at if tb.started_at is not None else now
        return self._fail(self._stage, FailureKind.CRASH, tb.opener, at)

    def _exception(self, line: str, tb: _Traceback, now: float | None) -> LogEvent:
        """An exception line inside a traceback: classify it, or refine the failure it belongs to."""
        stage, kind = self._classify(line, tb)
        if self._failure is not None:
            if self._failure_tb is tb:  # a chained exception: the last one is the message
                old = self._failure
                if not (old.kind is FailureKind.CRASH and kind is FailureKind.OOM):
                    stage, kind = old.stage, old.kind  # only an OOM further down the chain reclassifies
                self._failure = Failure(stage, kind, line.strip(), old.detail or _detail(line))
                if died := RANK_DIED.search(line):  # the launcher's last word names the dead rank
                    self._failed_rank = int(died.group(1))
            return LogEvent.NONE
        if self._shutting_down:
            return LogEvent.NONE
        if kind is FailureKind.CRASH and not tb.fatal:
            self._nonfatal.append(line)  # e.g. one request's error, logged while the server keeps serving
            return LogEvent.NONE
        self._failure_tb = tb
        return self._fail(stage, kind, line, tb.started_at if tb.started_at is not None else now)

    def _classify(self, line: str, tb: _Traceback) -> tuple[FailureStage, FailureKind]:
        if shapes.KV_OOM.search(line):
            return FailureStage.KV_ALLOCATION, FailureKind.OOM
        if shapes.RUNTIME_OOM.search(line):
            return FailureStage.UNDER_LOAD, FailureKind.OOM
        if shapes.PORT.search(line):
            return self._stage, FailureKind.PORT_IN_USE
        oom = bool(shapes.CUDA_OOM.search(line))
        stage = self._stage_of(tb.frames, graph_hint=shapes.GRAPH_FAILED in line or shapes.CUBLAS_OOM in line)
        return stage, FailureKind.OOM if oom else FailureKind.CRASH

    def _stage_of(self, frames: list[str], graph_hint: bool) -> FailureStage:
        """Where a traceback failed: the begin lines say most, the frames say the rest.

        Attention back-end and cuBLAS set-up run after the last `Memory pool end` and before the first
        capture line, and the draft's set-up runs after the target's last capture: frames tell those.
        """
        stage = self._stage
        if stage not in _GRAPH_STAGES and stage not in _BEFORE_GRAPHS:
            return stage  # warm-up or under load: graphs are done
        in_graph = graph_hint or any(shapes.GRAPH_FRAME.search(f) for f in frames)
        in_kv = not in_graph and any(shapes.KV_FRAME.search(f) for f in frames)
        draft = any(shapes.DRAFT_PATH.search(f.rsplit(":", 1)[0]) for f in frames)
        if in_graph:
            if stage is FailureStage.DRAFT_GRAPH_CAPTURE or draft:
                return FailureStage.DRAFT_GRAPH_CAPTURE
            return FailureStage.TARGET_GRAPH_CAPTURE
        if in_kv:
            return FailureStage.KV_ALLOCATION
        return stage

    def _fail(
        self,
        stage: FailureStage,
        kind: FailureKind,
        message: str,
        at: float | None,
        *,
        runtime: bool = False,
        port: bool = False,
    ) -> LogEvent:
        self._runtime_oom |= runtime or (kind is FailureKind.OOM and stage is FailureStage.UNDER_LOAD)
        self._port_in_use |= port
        if self._failure is not None:
            return LogEvent.NONE
        self._failure = Failure(stage, kind, message.strip(), _detail(message))
        died = RANK_DIED.search(message)
        self._failed_rank = int(died.group(1)) if died else self._line_rank
        self._error_line_at = at
        log.info("server log: %s at %s: %s", kind, stage, message.strip()[:200])
        return LogEvent.FAILED

    @staticmethod
    def _worse(a: LogEvent, b: LogEvent) -> LogEvent:
        order = (LogEvent.NONE, LogEvent.READY, LogEvent.FAILED)
        return a if order.index(a) >= order.index(b) else b

    # -- the account ----------------------------------------------------------------------------

    def _unfinished(self, p: _Pending) -> GraphCapture:
        is_draft = "draft" in p.name.lower()
        return GraphCapture(
            p.name, is_draft, p.avail_before_gb, None, None, None, p.batch_sizes, p.num_tokens, p.backend
        )

    def _memory(self) -> MemoryAccount:
        target = self._weights[:1]
        drafts = self._weights[1:]
        groups = [g for g in self._kv_groups if g]
        kv, draft_kv = (groups[0] if groups else []), [a for g in groups[1:] for a in g]
        return MemoryAccount(
            avail_at_start_gb=target[0].avail_before_gb if target else self._weight_begin,
            weights_gb=target[0].usage_gb if target else None,
            draft_weights_gb=total_gb(w.usage_gb for w in drafts),
            avail_after_weights_gb=self._avail_after_weights,
            kv_cache_tokens=kv[0].tokens if kv else None,
            kv_cache_gb=total_gb(a.size_gb for a in kv),
            draft_kv_cache_tokens=draft_kv[0].tokens if draft_kv else None,
            draft_kv_cache_gb=total_gb(a.size_gb for a in draft_kv),
            avail_after_kv_gb=self._avail_after_kv,
            graph_gb=total_gb(g.usage_gb for g in self._graphs if not g.is_draft),
            draft_graph_gb=total_gb(g.usage_gb for g in self._graphs if g.is_draft),
            avail_end_gb=self._avail_end if self._avail_end is not None else self._last_avail,
            max_total_num_tokens=self._max_total,
        )

    def _resolved_args(self, raw: dict[str, str]) -> ResolvedArgs:
        decode = pyrepr.decode_graph_config(raw)
        max_bs = pyrepr.as_int(raw.get("cuda_graph_max_bs"))
        if max_bs is None:
            max_bs = pyrepr.as_int(raw.get("cuda_graph_max_bs_decode"))
        if max_bs is None:
            max_bs = pyrepr.as_int(decode.get("max_bs"))
        listed = (raw.get("cuda_graph_bs"), raw.get("cuda_graph_bs_decode"), decode.get("bs"))
        bs_text = next((v for v in listed if v and v != "None"), None)
        return ResolvedArgs(
            mem_fraction_static=pyrepr.as_float(raw.get("mem_fraction_static")),
            cuda_graph_max_bs=max_bs,
            max_running_requests=pyrepr.as_int(raw.get("max_running_requests")),
            speculative_algorithm=pyrepr.as_str(raw.get("speculative_algorithm")),
            speculative_num_steps=pyrepr.as_int(raw.get("speculative_num_steps")),
            speculative_eagle_topk=pyrepr.as_int(raw.get("speculative_eagle_topk")),
            speculative_num_draft_tokens=pyrepr.as_int(raw.get("speculative_num_draft_tokens")),
            tp_size=pyrepr.as_int(raw.get("tp_size")),
            max_running_requests_reset_to=self._reset_to,
            effective_max_running_requests=self._effective_mrr,
            raw=dict(raw),
            cuda_graph_bs=pyrepr.ints(bs_text),
            disable_cuda_graph=pyrepr.as_bool(raw.get("disable_cuda_graph")),
            context_len=self._context_len,
        )


def _detail(message: str) -> str:
    tried = shapes.TRIED.search(message)
    return tried.group(0) if tried else ""


def parse_log(text: str) -> LogReport:
    """Parse a whole log at once (no `now`: ``error_line_at`` stays None)."""
    parser = LogParser()
    for line in text.splitlines():
        parser.feed(line)
    parser.finish()
    return parser.report()
