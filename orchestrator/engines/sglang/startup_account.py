"""The start-up memory account, read off rank 0's lines of an SGLang server log.

Weights, KV pools, CUDA-graph captures and the resolved server arguments, in the order SGLang prints
them; which start-up stage the lines have reached is kept here too (``stage``), because a failure is
classified by it (``logparse``). Runtime figures (accept lengths, throughput, retractions) of the decode
lines are counted here as well.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from orchestrator.engines.logrecords import GraphCapture, KvAllocation, WeightLoad
from orchestrator.engines.sglang import pyrepr
from orchestrator.engines.sglang import sglang_lines as shapes
from orchestrator.engines.sglang.server_args import SglangServerArgs
from orchestrator.records import FailureStage, MemoryAccount


def total_gb(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return round(sum(present), 2) if present else None


@dataclass
class _Pending:
    """A graph capture whose `begin` line was seen."""

    name: str
    avail_before_gb: float | None
    batch_sizes: tuple[int, ...]
    num_tokens: tuple[int, ...]
    backend: str | None


class StartupAccount:
    """Fed rank 0's prefixed lines one at a time (``feed``); other DP ranks' TP0 lines feed
    ``runtime_stats`` only."""

    def __init__(self) -> None:
        self.stage = FailureStage.LAUNCH  # how far start-up got, as its lines show
        self._raw_args: dict[str, str] | None = None
        self._reset_to: int | None = None
        self._effective_mrr: int | None = None
        self._context_len: int | None = None
        self._weight_begin: float | None = None
        self.weight_loads: list[WeightLoad] = []
        self.kv_allocations: list[KvAllocation] = []
        self._kv_groups: list[list[KvAllocation]] = [[]]  # closed by each `Memory pool end`
        self._avail_after_kv: float | None = None
        self._avail_after_weights: float | None = None
        self._graphs: list[GraphCapture] = []
        self._pending: dict[str, _Pending] = {}
        self._max_total: int | None = None
        self._avail_end: float | None = None
        self._last_avail: float | None = None
        self.accept_lens: list[float] = []
        self.gen_throughputs: list[float] = []
        self.retracted = 0
        self.retract_lines = 0
        self.adaptive_switches: list[tuple[int, int]] = []

    def resolved_args(self) -> SglangServerArgs | None:
        """The server's arguments as it resolved them; None when the log never printed them."""
        if self._raw_args is None and self._reset_to is None and self._effective_mrr is None:
            return None
        return self._args_from(self._raw_args or {})

    def graph_captures(self) -> list[GraphCapture]:
        """Every capture seen, those that began and never ended last (unfinished)."""
        return [*self._graphs, *(self._unfinished(p) for p in self._pending.values())]

    def feed(self, msg: str) -> None:
        """Rank 0's start-up lines: the memory account, the resolved arguments and the stage."""
        if m := shapes.WEIGHT_BEGIN.match(msg):
            self._weight_begin = self._avail(float(m.group(1)))
            self.stage = FailureStage.WEIGHT_LOADING
        elif m := shapes.WEIGHT_END.match(msg):
            mid = m.group("mid").strip(", ")
            dtype = mid.removeprefix("dtype=") or None
            cls = m.group("cls")
            after = self._avail(float(m.group("after")))
            draft = bool(self.weight_loads)  # the target always loads first, in every version
            elapsed = float(m.group("elapsed")) if m.group("elapsed") else None
            self.weight_loads.append(
                WeightLoad(cls, self._weight_begin, after, float(m.group("usage")), elapsed, dtype, draft)
            )
            if not self.kv_allocations:
                self._avail_after_weights = after
            self._weight_begin = None
            self.stage = FailureStage.KV_ALLOCATION
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
            self.kv_allocations.append(alloc)
            self._kv_groups[-1].append(alloc)
            self.stage = FailureStage.KV_ALLOCATION
        elif m := shapes.POOL_END.match(msg):
            avail = self._avail(float(m.group(1)))
            if not self._graphs and not self._pending:
                self._avail_after_kv = avail
            if self._kv_groups[-1]:
                self._kv_groups.append([])
            self.stage = FailureStage.KV_ALLOCATION
        elif m := shapes.CAPTURE.match(msg):
            self._capture(m)
        elif m := shapes.ADAPTIVE_SWITCH.match(msg):
            self.adaptive_switches.append((int(m.group(1)), int(m.group(2))))
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
            if self.stage is not FailureStage.UNDER_LOAD:
                self.stage = FailureStage.WARMUP
        elif m := shapes.RESET.search(msg):
            self._reset_to = int(m.group(1))
        elif "server_args=" in msg and self._raw_args is None:
            self._raw_args = pyrepr.parse_server_args(msg)
        else:
            self.runtime_stats(msg)

    def runtime_stats(self, msg: str) -> None:
        if shapes.DECODE.match(msg):
            if a := shapes.ACCEPT.search(msg):
                self.accept_lens.append(float(a.group(1)))
            if t := shapes.GEN_TPUT.search(msg):
                self.gen_throughputs.append(float(t.group(1)))
        elif shapes.RETRACT.search(msg):
            self.retract_lines += 1
            n = shapes.RETRACTED.search(msg)
            self.retracted += int(n.group(1)) if n else 1

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
            self.stage = FailureStage.DRAFT_GRAPH_CAPTURE if is_draft else FailureStage.TARGET_GRAPH_CAPTURE
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

    def _unfinished(self, p: _Pending) -> GraphCapture:
        is_draft = "draft" in p.name.lower()
        return GraphCapture(
            p.name, is_draft, p.avail_before_gb, None, None, None, p.batch_sizes, p.num_tokens, p.backend
        )

    def memory(self) -> MemoryAccount:
        target = self.weight_loads[:1]
        drafts = self.weight_loads[1:]
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

    def _args_from(self, raw: dict[str, str]) -> SglangServerArgs:
        decode = pyrepr.decode_graph_config(raw)
        max_bs = pyrepr.as_int(raw.get("cuda_graph_max_bs"))
        if max_bs is None:
            max_bs = pyrepr.as_int(raw.get("cuda_graph_max_bs_decode"))
        if max_bs is None:
            max_bs = pyrepr.as_int(decode.get("max_bs"))
        listed = (raw.get("cuda_graph_bs"), raw.get("cuda_graph_bs_decode"), decode.get("bs"))
        bs_text = next((v for v in listed if v and v != "None"), None)
        return SglangServerArgs(
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
