"""What `python -m orchestrator.driver.memory.fit` says of a launch once it starts: the peak its forwards take
under the given load, whether what start-up leaves holds it, and the largest fraction that still does; a
ready launch's log (``--log``) corrects what the prior says start-up leaves, as a sweep's first launch does.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, replace
from pathlib import Path

from orchestrator.driver.memory.facts import MemoryFacts
from orchestrator.driver.memory.prior import Estimate, left_after_start
from orchestrator.driver.memory.serving import ServingPeak, ServingWorkload, serving_ceiling, serving_peak
from orchestrator.engines.logs import parse_log
from orchestrator.records import ServerConfig


@dataclass(frozen=True)
class ServingCheck:
    """The serving peak of the configuration under the given load, and where it still fits."""

    peak: ServingPeak
    concurrency: int
    left: float
    ceiling: float
    shift: float = 0.0  # what a launch's log moved the prior's left by

    @property
    def serves(self) -> bool:
        return self.peak.total_gib <= self.left

    def rows(self, est: Estimate) -> list[tuple[str, str]]:
        if not est.fits:
            return []
        verdict = "yes" if self.serves else f"no: {self.left:.2f} GiB left after start-up"
        return [
            (
                "serving peak",
                f"{self.peak.total_gib:.2f} GiB at concurrency {self.concurrency}: {self.peak.terms()}",
            ),
            (
                "serving ceiling",
                f"{self.ceiling:.4f} (the largest fraction that leaves room for the serving peak"
                + (
                    f"; {self.shift:+.2f} GiB left after start-up from the log)"
                    if self.shift
                    else "; the prior's left after start-up, which a launch's --log raises: by 0.8-1.1 GiB "
                    "on the H200's 8B shape, 1.5-1.7 on the 32B)"
                ),
            ),
            ("serves", verdict),
        ]


def serving_check(
    args: argparse.Namespace, facts: MemoryFacts, config: ServerConfig, shift: float
) -> ServingCheck:
    """The serving peak of ``config`` at the flags' load, against what start-up leaves moved by ``shift``."""
    costs = facts.serving
    assert costs is not None  # the facts come from config.json shapes
    concurrency = args.concurrency or args.max_running_requests
    workload = ServingWorkload(concurrency, args.input_len, args.chunked_prefill_size)
    peak = serving_peak(costs, config, workload.load(facts.gpu_total_mib, facts.tp))

    def left(f: float) -> float:
        return left_after_start(facts, replace(config, mem_fraction_static=f)) + shift

    ceiling = serving_ceiling(left, peak.total_gib)
    return ServingCheck(peak, concurrency, left(config.mem_fraction_static), ceiling, shift)


def log_shift(path: str, facts: MemoryFacts) -> float | str:
    """How much more a ready launch's log had left after start-up than the prior predicts for it (the
    prior credits none of what the allocator gives back before the captures); a message when the log
    cannot say."""
    try:
        text = Path(path).read_text(errors="replace")
    except OSError as err:
        return f"--log {path}: {err.strerror or err}"
    report = parse_log(text)
    a, end = report.args, report.memory.avail_end_gb
    if a is None or not report.ready or end is None or a.mem_fraction_static is None:
        return f"--log {path}: not the log of a server that started (no server_args line or no ready figures)"
    launched = ServerConfig(
        mem_fraction_static=a.mem_fraction_static,
        cuda_graph_max_bs=a.cuda_graph_max_bs or 256,
        max_running_requests=a.max_running_requests or 48,
        speculative_num_steps=a.speculative_num_steps,
        speculative_eagle_topk=a.speculative_eagle_topk,
        speculative_num_draft_tokens=a.speculative_num_draft_tokens,
    )
    return end - left_after_start(facts, launched)
