"""The memory flags to launch a tree with next, in a space of fewer trees than the model needs.

With fewer than `spec_model.MIN_TREES` trees there is no fit to rank or race on, so once each tree is
launched the memory flags are what is left to search. Left to the sampler, its random start-up spends
about half its launches on flags that throttle the workload. On the H200 grid (one tree,
trials/h200-8b-grid.yaml) it launched a throttled cell (43-62 % slower) with half of the search's
launches, and the best cell in 1 of 20 seeds. The six cells that cover concurrency 32 lie within 1.4 % of
each other, which the structure's rule (the smallest covering graph bs, the highest fraction that fits)
cannot rank.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Collection, Sequence

from orchestrator.config.draft_tree import DraftTree
from orchestrator.driver.memory.learned import MemoryModel
from orchestrator.driver.proposal.structure import Structure
from orchestrator.driver.proposal.trees import dim_values
from orchestrator.records import ServerConfig
from orchestrator.spec import engine_catalog
from orchestrator.spec.search import make_config
from orchestrator.spec.sweep_spec import SweepSpec

# A continuous range (the fraction, an engine's own value) is searched at its ends and its middle, not on its
# whole grid.
MAX_FLAG_FRACTIONS = 5


def covering_flags(
    spec: SweepSpec,
    structure: Structure,
    leader: ServerConfig,
    launched: Collection[ServerConfig],
    model: MemoryModel,
) -> tuple[ServerConfig, str] | None:
    """The leader's tree at the next memory flags that cover the workload's highest concurrency, and
    why. Graph bs and max running must be at or above that concurrency: below it they throttle the server
    (the structure's own rule). The fraction must be one the memory model does not rule out. The flags
    farthest from those this tree was launched with go first. Flags the engine serves as one server (for
    SGLang, a graph bs above max running is the server of graph bs = max running: it captures graphs up
    to it) are one option, launched once under any of its names. None when every such server is
    launched: the sampler proposes."""
    tree = DraftTree.of(leader)
    if tree is None:
        return None
    top = max(spec.workload.concurrency)
    graphs = _covering_values(dim_values(spec.search.cuda_graph_max_bs, integer=True), top)
    running = _covering_values(dim_values(spec.search.max_running_requests, integer=True), top)
    fractions = _ends_and_middle(list(structure.fractions))
    own = {name: _ends_and_middle(dim_values(dim)) for name, dim in sorted(spec.search.engine.items())}
    server_of = engine_catalog.server_of(spec.engine)
    servers = {server_of(c) for c in launched}
    options: list[ServerConfig] = []
    for r in running:
        for g in graphs:
            for f in fractions:
                for values in itertools.product(*own.values()):
                    engine_values = dict(zip(own, values, strict=True))
                    variant = make_config(
                        f, g, r, tree.steps, tree.topk, tree.draft_tokens, engine_values=engine_values
                    )
                    if server_of(variant) in servers:
                        continue
                    servers.add(server_of(variant))
                    if not model.predict(variant).skip:
                        options.append(variant)
    if not options:
        return None
    ends = (fractions[0], fractions[-1]), (graphs[0], graphs[-1]), (running[0], running[-1])
    own_ends = {name: (values[0], values[-1]) for name, values in own.items()}

    def coords(c: ServerConfig) -> tuple[float, ...]:
        def scaled(v: float, lo: float, hi: float, log: bool) -> float:
            if hi <= lo:
                return 0.0
            return math.log2(v / lo) / math.log2(hi / lo) if log else (v - lo) / (hi - lo)

        (f0, f1), (g0, g1), (r0, r1) = ends
        return (
            scaled(c.mem_fraction_static, f0, f1, False),
            scaled(server_of(c).cuda_graph_max_bs, g0, g1, True),
            scaled(c.max_running_requests, r0, r1, True),
            *(scaled(_or(c.engine_value(n), lo), lo, hi, False) for n, (lo, hi) in own_ends.items()),
        )

    same_tree = [coords(c) for c in launched if DraftTree.of(c) == tree and not c.speculative_adaptive]

    def distance(c: ServerConfig) -> float:
        return min((math.dist(coords(c), o) for o in same_tree), default=math.inf)

    # farthest first; a tie to the higher fraction, then the smaller graphs (the structure's preference)
    pick = max(options, key=lambda c: (distance(c), c.mem_fraction_static, -c.cuda_graph_max_bs))
    why = (
        f"memory flags: {pick.label()}, one of {len(options)} untried that cover concurrency {top} "
        f"(the space holds fewer trees than the model needs)"
    )
    return pick, why


def _or(value: float | None, default: float) -> float:
    return default if value is None else value  # a value of 0 is a value


def _ends_and_middle(values: list[float]) -> list[float]:
    """A dimension's values, or its ends and its middle where a continuous range gives too many."""
    if len(values) > MAX_FLAG_FRACTIONS:
        return [values[0], values[len(values) // 2], values[-1]]
    return values


def _covering_values(values: Sequence[float], need: int) -> list[int]:
    """The searched values at or above ``need``, ascending; the largest alone when none is."""
    above = sorted(int(v) for v in values if v >= need)
    return above or [int(max(values))]
