"""Benchmark 2, time to give up: how long a failed launch holds the node after the failure shows.

Both run `TrialRun` with a real simulated server (outside Ray, as a worker would run it):

- OOM: a CUDA-graph OOM at start-up (fraction 0.99, graph batch 512, as the real H200 run). Two figures:
  the trial's own `oom_to_clean_s` (from the moment its log follower *reads* the error line to the GPUs
  reported clean), and the same end measured from the moment the line is *in the log file*, seen by a
  watcher thread that polls the file every millisecond (so the follower's polling delay counts).
- Hang: a server that never becomes ready (its start-up stretched far past a 1 s start-up timeout); from
  the deadline to the trial closed with its GPUs clean (`wall_s - startup_s`).
"""

from __future__ import annotations

import logging
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks.harness.table import Row, quantile
from benchmarks.system.live import live_spec, profile_dict
from orchestrator.engines import engine_for
from orchestrator.engines.engine import LogReader
from orchestrator.engines.logrecords import LogEvent
from orchestrator.engines.process import LogFollower
from orchestrator.node.backends import SimulatedNode, local_node_id
from orchestrator.node.trial import TrialRun
from orchestrator.records import TrialResult, TrialStatus
from orchestrator.spec.search import make_config
from orchestrator.spec.sweep_spec import TimeoutSpec
from orchestrator.trial_events import TrialRequest

log = logging.getLogger(__name__)
BENCH = "2 time to give up"
OOM_CONFIG = make_config(0.99, 512, 512, 3, 1, 4)
HANG_STARTUP_TIMEOUT_S = 1.0


@dataclass(frozen=True)
class GiveUpSettings:
    repeats: int = 20


class FailureLineWatch(threading.Thread):
    """Notes when the server's failure line lands in its log: the engine's log reader fed as fast as lines
    appear."""

    def __init__(self, log_path: Path, reader: LogReader) -> None:
        super().__init__(daemon=True)
        self.log_path = log_path
        self.reader = reader
        self.seen_at: float | None = None
        self.stop = threading.Event()

    def run(self) -> None:
        follower, parser = LogFollower(self.log_path), self.reader
        while not self.stop.is_set():
            for line in follower.new_lines():
                if parser.feed(line) is LogEvent.FAILED:
                    self.seen_at = time.monotonic()
                    return
            time.sleep(0.001)


@dataclass(frozen=True)
class Timed:
    result: TrialResult
    line_at: float | None  # when the failure line was in the file (monotonic)
    closed_at: float  # when TrialRun.run returned: server stopped, GPUs checked clean


def _trial(profile: dict[str, object], timeouts: TimeoutSpec, workdir: Path, number: int) -> Timed:
    spec = live_spec("giveup", dict(profile), timeouts=timeouts)
    folder = workdir / f"{number:03d}"
    request = TrialRequest(spec=spec, config=OOM_CONFIG, number=number, workdir=str(folder))
    node = SimulatedNode(spec, local_node_id(), dict(profile))
    run = TrialRun(request, node, None)
    watch = FailureLineWatch(run.log_path, engine_for(spec.engine).log_parser())
    watch.start()
    result = run.run()
    closed = time.monotonic()
    watch.stop.set()
    watch.join(timeout=5)
    return Timed(result, watch.seen_at, closed)


def run_giveup(settings: GiveUpSettings) -> tuple[list[Row], list[str]]:
    timeouts = TimeoutSpec(startup_s=60, benchmark_s=60, gpu_clean_s=20, stop_s=10, hang_after_error_s=10)
    oom_profile = profile_dict("h200-tiny", startup_time_scale=0.004)
    hang_profile = profile_dict("h200-tiny", startup_time_scale=1.0)  # 45 s of imports: never ready in 1 s
    hang_timeouts = timeouts.model_copy(update={"startup_s": HANG_STARTUP_TIMEOUT_S})
    oom_s: list[float] = []
    line_s: list[float] = []
    hang_s: list[float] = []
    problems: list[str] = []
    with tempfile.TemporaryDirectory(prefix="specsweep-giveup-") as tmp:
        for i in range(settings.repeats):
            t = _trial(oom_profile, timeouts, Path(tmp) / "oom", i)
            r = t.result
            if r.status is TrialStatus.OOM and r.oom_to_clean_s is not None:
                oom_s.append(r.oom_to_clean_s)
                if t.line_at is not None:
                    line_s.append(t.closed_at - t.line_at)
            else:
                problems.append(f"OOM run {i}: {r.status.value} {r.failure}")
            h = _trial(hang_profile, hang_timeouts, Path(tmp) / "hang", i).result
            if h.status is TrialStatus.TIMEOUT:
                hang_s.append(h.wall_s - HANG_STARTUP_TIMEOUT_S)
            else:
                problems.append(f"hang run {i}: {h.status.value} {h.failure}")
    rows = []
    for case, values, what in (
        ("graph-capture OOM at start-up", oom_s, "oom_to_clean_s: line read → GPUs clean"),
        ("graph-capture OOM at start-up", line_s, "OOM line in the log → trial closed, GPUs clean"),
        ("never ready (start-up timeout 1 s)", hang_s, "deadline → trial closed, GPUs clean"),
    ):
        for stat, q in (("median", 0.5), ("p95", 0.95)):
            value = quantile(values, q) if values else None
            shown = f"{value:.3f} s" if value is not None else "no run"
            rows.append(Row(BENCH, case, f"{len(values)} runs", f"{what} ({stat})", value, shown))
    notes = [
        "Time to give up: TrialRun with the simulated server on h200-tiny, outside Ray. The OOM is SGLang's "
        "graph-capture OOM (0.99 / graph bs 512 / 512 requests, as in the real H200 log); the "
        "simulated server "
        "SIGKILLs itself right after the line (real SGLang 0.5.17 takes 0.07-0.12 s more). The trial's log "
        "follower polls every 50 ms, which is most of the gap between the two OOM figures. The "
        "hang is a start-up that would take 45 s "
        "against a 1 s start-up timeout; the trial then stops it with SIGINT. Both end with the fake NVML "
        "polled every 0.2 s until clean."
    ]
    notes += [f"Time to give up, unexpected outcome: {p}" for p in problems]
    return rows, notes
