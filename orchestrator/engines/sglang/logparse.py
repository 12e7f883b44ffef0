"""Reads an SGLang server log (0.5.5 to 0.5.23) into a start-up memory account and a classified failure.

The parser is fed one line at a time while a live log is followed, so that the caller learns of
readiness or of a failure on the very line that shows it; ``parse_log`` runs the same code on a whole
file. The memory account itself is kept by ``startup_account``; this module follows tracebacks,
classifies failures and knows readiness. Line shapes were read off the SGLang sources of each version
and checked against real 0.5.17 logs from an H200, which win where the two disagree.

Only the first rank's lines (``TP0``, or no rank tag on one GPU) feed the memory account: with tp > 1
every rank prints the same lines and the figures are per GPU anyway; each rank's own figures are kept
beside it (`ranks`). A failure is taken from any rank, because the rank that dies first is not always
rank 0, and the report names that rank.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from orchestrator.engines.engine import read_all
from orchestrator.engines.logrecords import LogEvent, LogReport
from orchestrator.engines.sglang import sglang_lines as shapes
from orchestrator.engines.sglang.pyrepr import parse_mapping, parse_server_args
from orchestrator.engines.sglang.ranks import RANK_DIED, RankFigureReader, tp_rank
from orchestrator.engines.sglang.server_args import SglangServerArgs
from orchestrator.engines.sglang.startup_account import StartupAccount
from orchestrator.records import Failure, FailureKind, FailureStage

__all__ = ["LogParser", "SglangLogReport", "parse_log", "parse_mapping", "parse_server_args"]

SglangLogReport = LogReport[SglangServerArgs]

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


class LogParser:
    """Incremental: fed line by line while following a live log file; also used on a whole file."""

    def __init__(self) -> None:
        self._account = StartupAccount()
        self._ready = False
        self._ready_at: float | None = None
        self._shutting_down = False
        self._failure: Failure | None = None
        self._failure_tb: _Traceback | None = None
        self._error_line_at: float | None = None
        self._runtime_oom = False
        self._port_in_use = False
        self._tb: _Traceback | None = None
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

    def report(self) -> SglangLogReport:
        acct = self._account
        return SglangLogReport(
            ready=self._ready,
            failure=self._failure,
            memory=acct.memory(),
            args=acct.resolved_args(),
            weight_loads=tuple(acct.weight_loads),
            kv_allocations=tuple(acct.kv_allocations),
            graphs=tuple(acct.graph_captures()),
            decode_accept_lens=tuple(acct.accept_lens),
            retractions=acct.retracted,
            runtime_oom=self._runtime_oom,
            error_line_at=self._error_line_at,
            port_in_use=self._port_in_use,
            last_stage=self._failure.stage if self._failure is not None else acct.stage,
            decode_gen_throughputs=tuple(acct.gen_throughputs),
            retraction_lines=acct.retract_lines,
            nonfatal_errors=tuple(self._nonfatal),
            ready_at=self._ready_at,
            ranks=self._ranks.figures(),
            failed_rank=self._failed_rank,
            adaptive_switches=tuple(acct.adaptive_switches),
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
            self._account.feed(msg)
        elif tags.get("TP", "0") == "0":
            self._account.runtime_stats(msg)  # another DP rank's TP0 serves its own requests
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
            return self._fail(self._account.stage, FailureKind.PORT_IN_USE, text, now, port=True)
        if shapes.ARGPARSE_ERROR.match(text):
            return self._fail(self._account.stage, FailureKind.CRASH, text, now)
        return LogEvent.NONE

    def _prefixed_event(self, msg: str, now: float | None) -> LogEvent:
        if shapes.READY in msg:
            first = not self._ready
            self._ready, self._account.stage = True, FailureStage.UNDER_LOAD
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
            return self._fail(self._account.stage, FailureKind.PORT_IN_USE, msg, now, port=True)
        if shapes.FATAL_LINE.search(msg) and not self._shutting_down:
            # The launcher's echo of a child's death: the cause, if logged, came first.
            message = self._nonfatal[-1] if self._ready and self._nonfatal else msg
            return self._fail(self._account.stage, FailureKind.CRASH, message, now)
        return LogEvent.NONE

    # -- failures -------------------------------------------------------------------------------

    def _close_traceback(self, now: float | None) -> LogEvent:
        """A traceback ends at the next prefixed line (or the end of the log)."""
        tb, self._tb = self._tb, None
        if tb is None or tb.exceptions or not tb.fatal or self._shutting_down:
            return LogEvent.NONE
        at = tb.started_at if tb.started_at is not None else now
        return self._fail(self._account.stage, FailureKind.CRASH, tb.opener, at)

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
            return self._account.stage, FailureKind.PORT_IN_USE
        oom = bool(shapes.CUDA_OOM.search(line))
        stage = self._stage_of(tb.frames, graph_hint=shapes.GRAPH_FAILED in line or shapes.CUBLAS_OOM in line)
        return stage, FailureKind.OOM if oom else FailureKind.CRASH

    def _stage_of(self, frames: list[str], graph_hint: bool) -> FailureStage:
        """Where a traceback failed: the begin lines say most, the frames say the rest.

        Attention back-end and cuBLAS set-up run after the last `Memory pool end` and before the first
        capture line, and the draft's set-up runs after the target's last capture: frames tell those.
        """
        stage = self._account.stage
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


def _detail(message: str) -> str:
    tried = shapes.TRIED.search(message)
    return tried.group(0) if tried else ""


def parse_log(text: str) -> SglangLogReport:
    """Parse a whole log at once (no `now`: ``error_line_at`` stays None)."""
    return read_all(LogParser(), text).report()
