"""A toy inference engine, registered from this folder alone: its own flags, launch module, log and API.

It shows what adding an engine takes (`engines.engine.Engine`, `engines.register`): the product launches,
watches, benchmarks and sweeps it (`test_toy_engine.py`, `test_toy_sweep.py`) with no edit anywhere else,
and it passes the engines' contract (`tests/engines/test_engine_contract.py`). Nothing of it is SGLang's:
`toy_server.py` speaks its own request format and writes its own log lines.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator import engines
from orchestrator.engines.api import Endpoints, StreamEnd
from orchestrator.engines.engine import TrialLaunch
from orchestrator.engines.logrecords import LogEvent, LogReport
from orchestrator.records import (
    Failure,
    FailureKind,
    FailureStage,
    Margin,
    MemoryAccount,
    ResolvedLaunch,
    ServerConfig,
)
from orchestrator.spec.engine_space import EngineSpace, FieldKind, RuleKind, SameServer, SpaceField

if TYPE_CHECKING:
    import aiohttp

FOLDER = Path(__file__).resolve().parent
PREFIX = "toy-server: "
READY_LINE = "toy-server: serving on"
TOY_ENDPOINTS = Endpoints(
    generate="/toy/generate", health="/toy/health", flush_cache="/toy/flush", server_info=("/toy/info",)
)
# The flags the toy's searched values go by (`ToyEngine.flag_name`, the rendered command, the report).
PARAM_FLAGS = {
    "mem_fraction_static": "--toy-fraction",
    "max_running_requests": "--toy-batch",
    "toy_tick_ms": "--toy-tick-ms",  # its own value: the pause between two decode steps
}

# The toy is searched in its fraction and its batch alone, under its own flags; the memory prior, fitted on
# SGLang's accounting, does not apply to it (no memory defaults). Its rule of its own: it pauses whole
# milliseconds (`toy_server.py`), so ticks 1.2 and 1.7 are one server.
TOY_SPACE = EngineSpace(
    same_server=(SameServer("toy_tick_ms", RuleKind.STEPPED, step=1.0),),
    fields=(
        SpaceField(
            "mem_fraction_static", FieldKind.FLOAT, PARAM_FLAGS["mem_fraction_static"], low=0.0, high=1.0
        ),
        SpaceField("max_running_requests", FieldKind.INT, PARAM_FLAGS["max_running_requests"], low=1.0),
        # a value SGLang has no field for: searched as the spec's `search.engine.toy_tick_ms`
        SpaceField("toy_tick_ms", FieldKind.FLOAT, PARAM_FLAGS["toy_tick_ms"], low=0.0),
    ),
)

_STARTING = re.compile(r"^[\d.]+ starting: ")
_WEIGHTS = re.compile(r"^weights loaded: (?P<gib>[\d.]+) GiB, (?P<free>[\d.]+) GiB free")
_KV = re.compile(r"^kv pool: (?P<tokens>\d+) tokens in (?P<gib>[\d.]+) GiB")
_SETTLED = re.compile(r"^settled: fraction (?P<fraction>[\d.]+), batch (?P<batch>\d+), gpus (?P<gpus>\d+)")


@dataclass(frozen=True)
class ToyArgs:
    """What the toy says it settled on (its `settled:` line): an `engines.logrecords.ResolvedArgs`."""

    mem_fraction_static: float | None = None
    max_running_requests: int | None = None
    tp_size: int | None = None
    cuda_graph_max_bs: int | None = None  # the toy captures no graphs
    speculative_num_steps: int | None = None
    speculative_eagle_topk: int | None = None
    speculative_num_draft_tokens: int | None = None

    @property
    def effective_max_running_requests(self) -> int | None:
        return self.max_running_requests

    def launch_values(self) -> ResolvedLaunch:
        return ResolvedLaunch(
            mem_fraction_static=self.mem_fraction_static,
            max_running_requests=self.max_running_requests,
            effective_max_running_requests=self.max_running_requests,
        )


@dataclass
class ToyLogParser:
    """Reads the toy's own lines: its stage as they go, its memory, what it settled on, ready, failed."""

    stage: FailureStage = FailureStage.LAUNCH
    ready: bool = False
    ready_at: float | None = None
    failure: Failure | None = None
    error_at: float | None = None
    memory: MemoryAccount = field(default_factory=MemoryAccount)
    args: ToyArgs | None = None

    def feed(self, line: str, now: float | None = None) -> LogEvent:
        if not line.startswith(PREFIX):
            return LogEvent.NONE
        msg = line.removeprefix(PREFIX).rstrip("\r\n")
        if _STARTING.match(msg):
            self.stage = FailureStage.WEIGHT_LOADING
        elif m := _WEIGHTS.match(msg):
            free = float(m["free"])
            self.memory = MemoryAccount(
                avail_at_start_gb=free + float(m["gib"]),
                weights_gb=float(m["gib"]),
                avail_after_weights_gb=free,
            )
            self.stage = FailureStage.KV_ALLOCATION
        elif m := _KV.match(msg):
            tokens = int(m["tokens"])
            self.memory = replace(
                self.memory, kv_cache_tokens=tokens, kv_cache_gb=float(m["gib"]), max_total_num_tokens=tokens
            )
        elif m := _SETTLED.match(msg):
            self.args = ToyArgs(float(m["fraction"]), int(m["batch"]), int(m["gpus"]))
        elif line.startswith(READY_LINE) and not self.ready:
            self.ready, self.ready_at, self.stage = True, now, FailureStage.UNDER_LOAD
            return LogEvent.READY
        elif msg.startswith("error: ") and self.failure is None:
            words = msg.removeprefix("error: ")
            kind = FailureKind.OOM if words.startswith("out of memory") else FailureKind.CRASH
            self.failure, self.error_at = Failure(self.stage, kind, words), now
            return LogEvent.FAILED
        return LogEvent.NONE

    def finish(self, now: float | None = None) -> LogEvent:
        return LogEvent.NONE  # the toy leaves nothing open: every line stands alone

    def report(self) -> LogReport[ToyArgs]:
        return LogReport(
            ready=self.ready,
            failure=self.failure,
            memory=self.memory,
            args=self.args,
            weight_loads=(),
            kv_allocations=(),
            graphs=(),
            decode_accept_lens=(),
            retractions=0,
            runtime_oom=False,
            error_line_at=self.error_at,
            port_in_use=False,
            last_stage=self.failure.stage if self.failure is not None else self.stage,
            ready_at=self.ready_at,
        )


class ToyStreamReader:
    """One JSON object a line: ``produced`` so far, and on the last ``stop``, ``prompt`` and ``steps``."""

    def __init__(self) -> None:
        self.last: dict[str, Any] = {}
        self.error = ""

    def tokens(self, line: bytes, count: int) -> int | None:
        try:
            obj = json.loads(line)
        except ValueError:
            self.error = self.error or f"unreadable line: {line[:100]!r}"
            return None
        if not isinstance(obj, dict) or not isinstance(obj.get("produced"), int):
            self.error = self.error or f"unexpected line: {line[:100]!r}"
            return None
        self.last = obj
        return int(obj["produced"])

    def end(self) -> StreamEnd:
        stop = self.last.get("stop")
        prompt, steps = self.last.get("prompt"), self.last.get("steps")
        return StreamEnd(
            done=stop is not None,
            finished=stop is not None,
            finish_reason=str(stop or ""),
            prompt_tokens=prompt if isinstance(prompt, int) else None,
            spec_verify_ct=steps if isinstance(steps, int) else None,
            error=self.error,
        )


@dataclass(frozen=True)
class ToyApi:
    endpoints: Endpoints = TOY_ENDPOINTS

    def stream_body(self, input_ids: Sequence[int], max_new_tokens: int) -> bytes:
        return json.dumps({"prompt": list(input_ids), "max_tokens": max_new_tokens, "stream": True}).encode()

    def stream_reader(self) -> ToyStreamReader:
        return ToyStreamReader()

    def greedy_body(
        self, input_ids: Sequence[int], max_new_tokens: int, *, scored: bool = False
    ) -> dict[str, Any]:
        return {"prompt": list(input_ids), "max_tokens": max_new_tokens, "stream": False}

    def greedy_ids(self, answer: Any) -> tuple[int, ...] | None:
        if not isinstance(answer, dict) or not isinstance(answer.get("tokens"), list):
            return None
        return tuple(int(i) for i in answer["tokens"])

    def greedy_margins(self, answer: Any) -> tuple[Margin | None, ...] | None:
        return None  # the toy server scores nothing: every difference is judged lossy

    def accept_length(self, info: Mapping[str, Any]) -> float | None:
        speculation = info.get("speculation")
        value = speculation.get("accepted_per_step") if isinstance(speculation, dict) else None
        return float(value) if isinstance(value, int | float) else None


@dataclass(frozen=True)
class ToyEngine:
    name: str = "toy"
    launch_module: str = "toy_server"  # tests/engines/toy/toy_server.py, on the server's PYTHONPATH
    owned_flags: frozenset[str] = frozenset(
        {
            "--toy-model",
            "--toy-gpus",
            "--toy-batch",
            "--toy-fraction",
            "--toy-tick-ms",
            "--toy-host",
            "--toy-port",
        }
    )
    api: ToyApi = ToyApi()
    space: EngineSpace = TOY_SPACE

    def installed_version(self, python: str) -> str:
        return "1.2"

    def parse_version(self, text: str) -> tuple[int, ...]:
        return tuple(int(p) for p in text.split(".") if p.isdigit())

    def unsupported(self, config: ServerConfig, version: str) -> str:
        return "the toy has no adaptive speculation" if config.speculative_adaptive else ""

    def flags(self, launch: TrialLaunch) -> list[str]:
        settings, config = launch.settings, launch.config
        return [
            "--toy-model",
            settings.model_path,
            "--toy-gpus",
            str(launch.tp_size),
            PARAM_FLAGS["max_running_requests"],
            str(config.max_running_requests),
            PARAM_FLAGS["mem_fraction_static"],
            f"{config.mem_fraction_static:g}",
            *(arg for name, value in config.engine_values for arg in (PARAM_FLAGS[name], f"{value:g}")),
            *settings.fixed_flags,
            "--toy-host",
            settings.host,
            "--toy-port",
            str(launch.port),
        ]

    def flag_name(self, param: str, version: str) -> str:
        own = param.removeprefix("engine_value.")  # an own value's MLflow param
        return PARAM_FLAGS.get(own) or "--toy-" + own.replace("_", "-")

    def log_parser(self) -> ToyLogParser:
        return ToyLogParser()

    async def flush_cache(self, base_url: str, session: aiohttp.ClientSession) -> bool:
        async with session.post(self.api.endpoints.url(base_url, self.api.endpoints.flush_cache)) as resp:
            return resp.status == 200


TOY = ToyEngine()
engines.register(TOY)
