"""A grid measured on real hardware, answering as an oracle: what every replayed launch draws from.

A measured grid is a product study folder (its `records/*.json`, the driver's `TrialRecord`s, one per
launch) of a spec whose space is small enough to launch whole (`trials/h200-8b-grid.yaml`: 3 fractions x
graph batch {16, 64, 256} x max running {16, 256}, one fixed tree, plus the same server without
speculation). `ReplayOracle` answers each configuration with what was measured: the truth is the measured
objective (the mean over repeated launches of one cell), its stages, start-up and wall time are the
record's, and a failed start is the record's failure.

Cells the engine serves as one server answer with the measured cell, by the engine's own rule, the one the
driver keys its measurements by (`spec.engine_catalog.server_of`): SGLang captures CUDA graphs only up to
`max_running_requests`, so graph bs 64 or 256 under max running 16 is the graph-bs-16 server. A measured
cell is always used as measured (the grid measures one such pair to check the rule). A configuration
neither measured nor equal to a measured one raises `Unmeasured`: a strategy that launches it cannot be
replayed (`benchmarks.search.replay` reports it as such rather than give it invented figures).

A grid is an entry of `GRIDS` (`MeasuredGrid`: a spec, a study folder, a name, the regimes it is replayed
under): the H200 8B grid above; the real pair (`real_pair`: SmolLM2-135M-Instruct and an EAGLE-3 draft
trained for it, `trials/smollm2-grid12.yaml`), twelve trees (steps {1, 2, 4, 6} x top-k {1, 4, 8}, each at
its widest draft up to 16) and the server without speculation at fixed memory flags, every launch on one
H100; and the pair's first grid (`real_pair_machines`, `trials/smollm2-h200-grid.yaml`), sixteen trees
launched over five H100s whose hosts differ by 47-58 %, kept for what it showed. A grid still partial
(as the pair's first was while its records arrived a few trees per node) is replayed on the largest
complete part of its space
(`MeasuredGrid.replayed`): the largest product of the spec's choices whose every configuration was measured
(or is the same server as a measured one), so that every strategy, the product's sweep included, searches
only what was measured; the notes say how many of the space's configurations that is.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pydantic

from benchmarks.harness.paths import DEMO_SPEC, ROOT
from benchmarks.truth.oracle import STOP_S, Evaluation, Oracle
from orchestrator.driver.answer.noise import Regime
from orchestrator.driver.search.space import space_configs
from orchestrator.records import MemoryAccount, ServerConfig, TrialRecord
from orchestrator.sim.profile import load_profile
from orchestrator.spec import engine_catalog
from orchestrator.spec.search import Choices, SearchSpace, make_config
from orchestrator.spec.sweep_spec import SweepSpec, load_spec

GRID_SPEC = ROOT / "trials" / "h200-8b-grid.yaml"
GRID_FOLDER = ROOT / "tests" / "fixtures" / "sglang" / "0.5.17" / "llama8b-grid"
PAIR_SPEC = ROOT / "trials" / "smollm2-grid12.yaml"
PAIR_FOLDER = ROOT / "tests" / "fixtures" / "sglang" / "0.5.17" / "smollm2-grid12-h100"
# the pair's first grid: 16 trees over five machines (the same server 47 % apart from one to another)
PAIR_MACHINES_SPEC = ROOT / "trials" / "smollm2-h200-grid.yaml"
PAIR_MACHINES_FOLDER = ROOT / "tests" / "fixtures" / "sglang" / "0.5.17" / "smollm2-chat-h100"
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
    # a cell launched again after a failed launch answers with the launch that measured it
    first = next((r.result for r in records if r.objective is not None), records[0].result)
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

    def __init__(self, spec: SweepSpec, records: Sequence[TrialRecord], profile: str = PROFILE) -> None:
        super().__init__(spec, load_profile(profile))
        cells: dict[ServerConfig, list[TrialRecord]] = {}
        for r in records:
            if r.result.status.free:  # never launched, or stopped under it: nothing was measured
                continue
            cells.setdefault(r.result.config, []).append(r)
        self.measured = {config: _evaluation(rs) for config, rs in cells.items()}
        # the engine's own rule of which configurations are one server (the product's, not a copy)
        self._server_of = engine_catalog.server_of(spec.engine)
        self._servers: dict[ServerConfig, ServerConfig] = {}
        for config in self.measured:
            # a server measured under its own name answers for its others; else its first measured name
            key = self._server_of(config)
            if config == key:
                self._servers[key] = config
            else:
                self._servers.setdefault(key, config)

    def cell(self, config: ServerConfig) -> ServerConfig:
        """The measured cell that answers for `config`: itself, or one the engine serves as the same
        server."""
        if config in self.measured:
            return config
        same = self._servers.get(self._server_of(config))
        if same is not None:
            return same
        raise Unmeasured(f"{config.label()} was not measured, and no measured cell is the same server")

    def answers(self, config: ServerConfig) -> bool:
        """Whether a measured cell answers for `config`."""
        try:
            self.cell(config)
        except Unmeasured:
            return False
        return True

    def evaluate(self, config: ServerConfig) -> Evaluation:
        return replace(self.measured[self.cell(config)], config=config)


def measured_bases(oracle: ReplayOracle, configs: Sequence[ServerConfig]) -> dict[ServerConfig, float]:
    """The server without speculation at each memory point of `configs` that the grid measured, by its
    truth (the mean of its launches): the bases a replay of the user's question adds to the optimum."""
    memory = {(c.mem_fraction_static, c.cuda_graph_max_bs, c.max_running_requests) for c in configs}
    bases = (make_config(*m) for m in sorted(memory))
    return {
        base: objective
        for base in bases
        if oracle.answers(base) and (objective := oracle.evaluate(base).objective) is not None
    }


def same_start(grid: SweepSpec) -> SweepSpec:
    """The grid's spec as every strategy gets it: the grid enqueued its cells as known-good
    configurations, launched the baseline and confirmed nothing; a replayed search starts from nothing
    and keeps the demo's confirmation (the product as shipped), like every other case."""
    demo = load_spec(DEMO_SPEC)
    # The grid answers every launch, so no prompt is sent: a text dataset's tokenizer (the model's, on the
    # node) is not needed here, where specsweep's baseline would otherwise build its greedy check's prompts.
    workload = grid.workload.model_copy(update={"dataset": "random", "tokenizer": ""})
    return grid.model_copy(
        update={
            "known_good": [],
            "budget": demo.budget.model_copy(update={"baseline": False}),
            "workload": workload,
        }
    )


DUMMY_DRAFT = (
    "the grid's draft (dummy weights) accepts nothing, so no speculative cell beats it; the search scores "
    "the speculative space, where the memory flags decide"
)


def baseline_note(folder: Path, why: str = DUMMY_DRAFT) -> str:
    """What the same server measured without speculation beside the grid's best speculative cell (each cell
    by the mean of its launches), as the records hold them, then `why`."""
    records = load_records(folder)
    base = [
        r.objective
        for r in records
        if r.objective is not None and r.result.config.speculative_num_steps is None
    ]
    if not base:
        return ""
    cells: dict[ServerConfig, list[float]] = {}
    for r in records:
        if r.objective is not None and r.result.config.speculative_num_steps is not None:
            cells.setdefault(r.result.config, []).append(r.objective)
    mean = statistics.fmean(base)
    note = f"without speculation the same server measured {mean:.1f} tok/s"
    if cells:
        top, label = max((statistics.fmean(v), c.label()) for c, v in cells.items())
        if mean > top:
            note += (
                f", above every one of the {len(cells)} speculative cells measured "
                f"(the best, {label}: {top:.1f} tok/s)"
            )
        else:
            note += f", not above the best speculative cell measured ({label}: {top:.1f} tok/s)"
    return f"{note}: {why}" if why else note


@dataclass(frozen=True)
class Replayed:
    """What a replay searches: the oracle (its spec's search block is the replayed space), the replayed
    configurations, and how much of the spec's space they are."""

    oracle: ReplayOracle
    configs: list[ServerConfig]
    space_size: int  # configurations of the spec's whole space
    measured_in_space: int  # of those, how many a measured cell answers for
    narrowed: tuple[str, ...] = ()  # the search block's dimensions the replay narrowed
    left_out: tuple[ServerConfig, ...] = ()  # measured configurations of the space outside the replayed part

    @property
    def complete(self) -> bool:
        return len(self.configs) == self.space_size

    def note(self) -> str:
        """How a partial grid is replayed, said plainly (empty for a complete grid)."""
        if self.complete:
            return ""
        search = self.oracle.spec.search
        dims = ", ".join(
            f"{name} {[_num(v) for v in getattr(search, name).choices]}" for name in self.narrowed
        )
        out = ", ".join(c.label() for c in self.left_out)
        return (
            f"the grid is still partial: {self.measured_in_space} of the {self.space_size} configurations of "
            f"its space are measured; the replay searches its largest complete part, {len(self.configs)} "
            f"configurations ({dims}): every strategy searches only that, and its best is the truth"
            + (f"; measured but left out: {out}" if out else "")
        )


def _num(v: float) -> float | int:
    return int(v) if float(v) == int(v) else v


def _subsets(choices: Sequence[float]) -> list[tuple[float, ...]]:
    """Every non-empty subset of `choices`, largest first."""
    return [c for k in range(len(choices), 0, -1) for c in itertools.combinations(choices, k)]


def complete_part(space: SearchSpace, answers: Any) -> SearchSpace:
    """The largest product of `space`'s choices whose every configuration `answers` (a predicate) holds:
    `space` itself when it all does. Ranges and single choices are kept as they are. Raises `Unmeasured`
    when no configuration does."""
    full = space_configs(space)
    if all(answers(c) for c in full):
        return space
    dims = {
        name: [float(v) for v in dim.choices]
        for name, dim in space
        if isinstance(dim, Choices) and len(dim.choices) > 1
    }
    best: tuple[int, dict[str, tuple[float, ...]]] | None = None
    for pick in itertools.product(*(_subsets(v) for v in dims.values())):
        chosen = dict(zip(dims, pick, strict=True))
        # a part's configurations are the whole space's whose values lie in the part: each tree's draft
        # tokens are clipped by its own steps and top-k only
        part = [c for c in full if all(float(getattr(c, n)) in vs for n, vs in chosen.items())]
        if part and (best is None or len(part) > best[0]) and all(answers(c) for c in part):
            best = (len(part), chosen)
    if best is None:
        raise Unmeasured("no configuration of the spec's space was measured")
    return space.model_copy(update={n: Choices(choices=list(vs)) for n, vs in best[1].items()})


@dataclass(frozen=True)
class MeasuredGrid:
    """A grid measured on real hardware, as the search benchmark replays it."""

    name: str  # the registry's key (`--grid`)
    case: str  # the rows' case
    set: str  # the rows' set
    spec: Path
    folder: Path
    regimes: tuple[Regime, ...]
    profile: str = PROFILE  # SGLang's defaults for the peers' unmeasured proposals
    search: Mapping[str, Any] = field(default_factory=dict)  # the spec's search block, as replayed
    why: str = DUMMY_DRAFT  # what the baseline without speculation means here
    # Whether the grid measured the server without speculation at its space's own memory flags, where
    # specsweep as shipped launches its baseline: then the replay also scores the user's question (the
    # space with that baseline), beside which tree is fastest. The H200 8B grid's baseline stands at
    # flags its space does not hold, and its draft accepts nothing: the trees alone are its question.
    with_baseline: bool = False

    def views(self) -> tuple[bool, ...]:
        """The replay's views of this grid: the speculative space alone, then the user's question."""
        return (False, True) if self.with_baseline else (False,)

    def view_case(self, with_baseline: bool) -> str:
        """The rows' case of a view: the grid's own for the trees alone."""
        return f"{self.case.removesuffix(')')}, with the baseline)" if with_baseline else self.case

    def records(self) -> list[TrialRecord]:
        return load_records(self.folder)

    def load_spec(self) -> SweepSpec:
        """The grid's spec as every strategy gets it (`same_start`), with the replayed search block."""
        spec = same_start(load_spec(self.spec))
        if not self.search:
            return spec
        search = SearchSpace.model_validate({**spec.search.model_dump(), **self.search})
        return spec.model_copy(update={"search": search})

    def replayed(self) -> Replayed:
        """The oracle and the configurations a replay searches: the spec's space, or its largest
        complete part while the grid is still partial."""
        spec, records = self.load_spec(), self.records()
        oracle = ReplayOracle(spec, records, self.profile)
        full = space_configs(spec.search)
        part = complete_part(spec.search, oracle.answers)
        if part is not spec.search:
            oracle = ReplayOracle(spec.model_copy(update={"search": part}), records, self.profile)
        configs = space_configs(oracle.spec.search)
        return Replayed(
            oracle,
            configs,
            len(full),
            sum(oracle.answers(c) for c in full),
            tuple(n for n, dim in part if dim != getattr(spec.search, n)),
            tuple(c for c in full if c not in configs and oracle.answers(c)),
        )

    def baseline_note(self) -> str:
        return baseline_note(self.folder, self.why)


PAIR_WHY = (
    "on this 135M target a verify step costs more than the tokens it gains save: every launch on one H100, "
    "the server without speculation the fastest at every level (the best tree 8 % behind at concurrency 1, "
    "15 % at 8, 28 % at 32; trees of 16 draft tokens accept 2.0-2.1 tokens a step, chains 1.4-1.65). The "
    "replay scores "
    "two questions: the user's (rows 'with the baseline': that server at the trees' memory flags is in the "
    "optimum, and specsweep runs as shipped, its baseline first), and which tree is fastest (the "
    "speculative space alone, specsweep without its baseline), where the top four trees lie within 2.2 %"
)

PAIR_MACHINES_WHY = (
    "on this 135M target a verify step costs more than the tokens it gains save: on the fifth machine "
    "(trials 15-22, six trees) the server without speculation measured 8097.0 tok/s, 30 % above the best "
    "tree there (s6k4d16, 6251.2), as on the first (5513.5 against s1k1d2's 3167.8). The launches ran on "
    "five machines, and the same server measured 47 % more on the fifth than on the first, so a cell's "
    "truth (the mean of its launches) is partly its machine's: the one-machine grid (real_pair) is the "
    "truth this pair is judged by"
)

GRIDS: dict[str, MeasuredGrid] = {
    "h200_8b": MeasuredGrid(
        "h200_8b", "h200-8b-grid (measured)", "real grid", GRID_SPEC, GRID_FOLDER, (Regime.GPU_BOUND,)
    ),
    # A 135M target's decode step is 2.7 ms at concurrency 32 on one H100, and one launch of this pair
    # moved by 8.4 % on another H100 (two configurations launched twice; the grid itself has no repeat):
    # overhead-bound; replayed GPU-bound too, as the optimistic case. Twelve trees, each at its widest
    # draft up to 16 (the launched trees exactly).
    "real_pair": MeasuredGrid(
        "real_pair",
        "smollm2-grid12-h100 (measured)",
        "real_pair",
        PAIR_SPEC,
        PAIR_FOLDER,
        (Regime.OVERHEAD_BOUND, Regime.GPU_BOUND),
        # no H100 profile of this pair: the tiny model's (a peer's unmeasured proposal is Unmeasured anyway)
        profile="h200-tiny",
        search={"speculative_num_draft_tokens": {"choices": [16]}},
        why=PAIR_WHY,
        with_baseline=True,
    ),
    "real_pair_machines": MeasuredGrid(
        "real_pair_machines",
        "smollm2-chat-h100 (measured, five machines)",
        "real_pair",
        PAIR_MACHINES_SPEC,
        PAIR_MACHINES_FOLDER,
        (Regime.GPU_BOUND, Regime.OVERHEAD_BOUND),
        profile="h200-tiny",
        search={"speculative_num_draft_tokens": {"choices": [16]}},
        why=PAIR_MACHINES_WHY,
        with_baseline=True,
    ),
}
