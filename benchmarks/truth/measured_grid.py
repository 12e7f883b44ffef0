"""A grid measured on real hardware, answering as an oracle: what every replayed launch draws from.

A measured grid is a product study folder (its `records/*.json`, the driver's `TrialRecord`s, one per
launch) of a spec whose space is small enough to launch whole (`trials/h200-8b-grid.yaml`: 3 fractions x
graph batch {16, 64, 256} x max running {16, 256}, one fixed tree, plus the same server without
speculation). `ReplayOracle` answers each configuration with what was measured: the truth is the measured
objective (the mean over repeated launches of one cell), its stages, start-up and wall time are the
record's, and a failed start is the record's failure.

Cells equal by SGLang's own rule answer with the measured cell: a server captures CUDA graphs only up to
`max_running_requests`, so graph bs 64 or 256 under max running 16 is the graph-bs-16 server. A measured
cell is always used as measured (the grid measures one such pair to check the rule). A configuration
neither measured nor equal to a measured one raises `Unmeasured`: a strategy that launches it cannot be
replayed (`benchmarks.search.replay` reports it as such rather than give it invented figures).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pydantic

from benchmarks.harness.paths import DEMO_SPEC, ROOT
from benchmarks.truth.oracle import STOP_S, Evaluation, Oracle
from orchestrator.records import MemoryAccount, ServerConfig, TrialRecord
from orchestrator.sim.profile import load_profile
from orchestrator.spec.sweep_spec import SweepSpec, load_spec

GRID_SPEC = ROOT / "trials" / "h200-8b-grid.yaml"
GRID_FOLDER = ROOT / "tests" / "fixtures" / "sglang" / "0.5.17" / "llama8b-grid"
PROFILE = "h200-llama8b"  # SGLang's defaults for the peers: the simulated profile of the same node
_ADAPTER: pydantic.TypeAdapter[TrialRecord] = pydantic.TypeAdapter(TrialRecord)


class Unmeasured(LookupError):
    """A configuration the grid did not measure and no measured cell stands for."""


def load_records(folder: Path) -> list[TrialRecord]:
    """Every launch's record of a study folder (`FOLDER/records/*.json`, or the folder itself), and of the
    repeat study kept beside it (`FOLDER/repeat/records`: cells launched a second time, whose mean is
    then the cell's truth)."""
    where = folder / "records" if (folder / "records").is_dir() else folder
    paths = sorted(where.glob("*.json"))
    if not paths:
        raise FileNotFoundError(f"{where}: no records (*.json); give a study folder with records/")
    paths += sorted((folder / "repeat" / "records").glob("*.json"))
    return [_ADAPTER.validate_json(p.read_bytes()) for p in paths]


def _evaluation(records: Sequence[TrialRecord]) -> Evaluation:
    """One cell: the first record's launch, its stages scaled so that the best stage is the mean measured
    objective of the cell's launches (the truth)."""
    first = records[0].result
    objectives = [r.objective for r in records if r.objective is not None]
    stages = first.stages
    if objectives and first.stages:
        truth = statistics.fmean(objectives)
        best = max(s.output_tok_per_s for s in first.stages if s.completed > 0)
        stages = tuple(replace(s, output_tok_per_s=s.output_tok_per_s * truth / best) for s in first.stages)
    startup = first.startup_s or 0.0
    stage_s = sum(s.duration_s for s in stages)
    return Evaluation(
        config=first.config,
        status=first.status,
        failure=first.failure,
        stages=stages if first.status.value == "ok" else (),
        memory=first.memory or MemoryAccount(),
        resolved_args=first.resolved_args,
        startup_s=startup if first.startup_s is not None else first.wall_s,
        pre_stage_s=max(0.0, first.wall_s - startup - stage_s - STOP_S) if first.startup_s else 0.0,
        stop_s=STOP_S,
        accept_length=first.server_accept_length,
    )


class ReplayOracle(Oracle):
    """An oracle that answers with a measured grid instead of the simulated node's model."""

    def __init__(self, spec: SweepSpec, records: Sequence[TrialRecord]) -> None:
        super().__init__(spec, load_profile(PROFILE))
        cells: dict[ServerConfig, list[TrialRecord]] = {}
        for r in records:
            cells.setdefault(r.result.config, []).append(r)
        self.measured = {config: _evaluation(rs) for config, rs in cells.items()}

    def cell(self, config: ServerConfig) -> ServerConfig:
        """The measured cell that answers for `config`: itself, or the server SGLang makes of it."""
        if config in self.measured:
            return config
        capped = replace(config, cuda_graph_max_bs=min(config.cuda_graph_max_bs, config.max_running_requests))
        if capped in self.measured:
            return capped
        raise Unmeasured(f"{config.label()} was not measured, and no measured cell is the same server")

    def evaluate(self, config: ServerConfig) -> Evaluation:
        return replace(self.measured[self.cell(config)], config=config)


def same_start(grid: SweepSpec) -> SweepSpec:
    """The grid's spec as every strategy gets it: the grid enqueued its cells as known-good
    configurations, launched the baseline and confirmed nothing; a replayed search starts from nothing
    and keeps the demo's confirmation (the product as shipped), like every other case."""
    demo = load_spec(DEMO_SPEC)
    return grid.model_copy(
        update={"known_good": [], "budget": demo.budget.model_copy(update={"baseline": False})}
    )


def baseline_note(folder: Path) -> str:
    """What the same server measured without speculation (the grid's dummy draft accepts nothing)."""
    base = [
        r.objective
        for r in load_records(folder)
        if r.objective is not None and r.result.config.speculative_num_steps is None
    ]
    if not base:
        return ""
    return (
        f"without speculation the same server measured {statistics.fmean(base):.1f} tok/s: the grid's draft "
        "(dummy weights) accepts nothing, so no speculative cell beats it; the search scores the speculative "
        "space, where the memory flags decide"
    )
