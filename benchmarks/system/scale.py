"""Benchmark 5, scale: the real sweep on 1, 2, 4 and 8 simulated 8-GPU nodes of one Ray cluster.

Each node is a `ray.cluster_utils.Cluster` node with 8 GPUs and one `trial_slot`, as `ray_cluster.yaml`
declares them; the driver places one trial per whole node. The same number of trials runs at every size,
so the sweep's wall time should fall with the nodes, and the share of node-time spent inside trials
(sum of trial walls / (nodes x sweep wall)) says how busy the driver keeps them.
"""

from __future__ import annotations

import logging
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import ray
from ray.cluster_utils import Cluster

from benchmarks.harness.table import Row
from benchmarks.system.live import LIVE_TIMEOUTS, killed_after_stop, live_spec, profile_dict, run_sweep
from orchestrator.driver.dispatch.placement import TRIAL_SLOT
from orchestrator.records import TrialStatus

log = logging.getLogger(__name__)
BENCH = "5 scale"


@dataclass(frozen=True)
class ScaleSettings:
    nodes: tuple[int, ...] = (1, 2, 4, 8)
    trials: int = 16


@dataclass(frozen=True)
class SizeRun:
    wall_s: float
    inside_s: float  # sum of the trials' walls
    launched: int
    not_ok: int  # trials that did not end OK (every configuration fits: none should)
    killed: int  # servers SIGKILLed after the stop grace


def _one_size(nodes: int, trials: int, workdir: Path) -> SizeRun:
    profile = profile_dict("kimi-k25-rtxpro6000", startup_time_scale=0.001)
    spec = live_spec(f"scale-{nodes}", profile)
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "num_gpus": 0})
    try:
        for _ in range(nodes):
            c.add_node(num_cpus=1, num_gpus=8, resources={TRIAL_SLOT: 1})
        c.wait_for_nodes()
        ray.init(
            address=c.address,
            logging_level=logging.WARNING,
            log_to_driver=False,
            runtime_env={"worker_process_setup_hook": "benchmarks.system.worker_ports.spread_ports"},
        )
        try:
            run = run_sweep(spec, profile, trials, workdir, nodes)
        finally:
            ray.shutdown()
    finally:
        c.shutdown()
    if len(run.results) != trials:
        # sizes are compared on the same number of trials, or the speed-up means nothing
        raise RuntimeError(f"{nodes} node(s): {len(run.results)} trials launched, not {trials}")
    return SizeRun(
        run.wall_s,
        sum(r.wall_s for r in run.results),
        len(run.results),
        sum(r.status is not TrialStatus.OK for r in run.results),
        sum(killed_after_stop(r) for r in run.results),
    )


def run_scale(settings: ScaleSettings) -> tuple[list[Row], list[str]]:
    rows: list[Row] = []
    base_wall: float | None = None
    killed_total = launched_total = 0
    with tempfile.TemporaryDirectory(prefix="specsweep-scale-") as tmp:
        for nodes in settings.nodes:
            size = _one_size(nodes, settings.trials, Path(tmp) / str(nodes))
            wall = size.wall_s
            killed_total += size.killed
            launched_total += size.launched
            base_wall = base_wall or wall
            share = size.inside_s / (nodes * wall) if wall else None
            case = f"{nodes} node{'s' if nodes > 1 else ''} x 8 GPUs"
            variant = f"{size.launched} trials"
            rows += [
                Row(BENCH, case, variant, "sweep wall", wall, f"{wall:.1f} s"),
                Row(BENCH, case, variant, "speed-up over 1 node", base_wall / wall,
                    f"{base_wall / wall:.2f}"),
                Row(BENCH, case, variant, "node-time inside trials", share,
                    f"{100 * share:.0f} %" if share is not None else "—"),
                Row(BENCH, case, variant, "trials that did not end OK", float(size.not_ok), f"{size.not_ok}"),
            ]  # fmt: skip
    notes = [
        f"Scale: one ray.cluster_utils.Cluster per size (a head with no GPU, then nodes of 8 GPUs and one "
        f"trial slot each), all on this machine's {os.cpu_count()} cores, so every raylet, worker and "
        "simulated server shares them: the figures are a floor for what separate machines would show. "
        f"Kimi profile with startup_time_scale 0.001, one stage of 2 requests x 8 tokens, {settings.trials} "
        "trials at every size. A node's first trial also pays for starting its Ray worker (imports). The "
        "nodes share one host, so each trial worker starts its free-port search at its own port (a Ray "
        "worker setup hook): the product's random start already makes it unlikely that two trials starting "
        "together on two nodes of one host pick the same port, and the hook rules it out (a race real "
        "nodes, being separate hosts, do not have)."
    ]
    if killed_total:
        notes.append(
            f"Scale: {killed_total} of {launched_total} servers were SIGKILLed after the "
            f"{LIVE_TIMEOUTS.stop_s:g} s stop grace (SIGINT is blocked in Ray workers; see the "
            "overhead note)."
        )
    return rows, notes
