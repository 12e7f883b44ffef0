"""Structure first: memory flags that cannot throttle the workload and that the memory model says fit.

An expert does not search the memory flags blindly: `cuda_graph_max_bs` and `max_running_requests` below
the highest concurrency throttle it (on an H200 with an 8B-shaped model at concurrency 32, graph bs 16 gave
892 tok/s and 256 gave 3079), and above it they only cost memory and, for the graphs, capture time and a
larger graph pool. So each is the smallest searched value at or above the highest concurrency level (the
largest searched value when none is). The fraction is as high as the memory model (the prior from the
models' config.json, with its graph margin, then what launches taught it) says fits for that tree: a
larger KV pool never slows a step, and a pool too small for the running requests retracts them.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from orchestrator.config.draft_tree import DraftTree
from orchestrator.driver.memory.learned import MemoryModel
from orchestrator.driver.memory.prior_model import PriorMemoryModel
from orchestrator.driver.proposal.trees import dim_values
from orchestrator.records import ServerConfig
from orchestrator.spec.search import SearchSpace, make_config

# Without a confident prediction (no prior, nothing learned yet) the fraction is the middle of what is not
# ruled out: a guess at the top is the likeliest OOM (on the demo's node, <= 0.5.9 rules, 0.92 fails its
# draft's graphs), and the memory model learns from the first launches.
UNSURE_QUANTILE = 0.5


@dataclass(frozen=True)
class Structure:
    """The memory flags the policy launches trees with (the fraction is chosen per tree)."""

    cuda_graph_max_bs: int
    max_running_requests: int
    fractions: tuple[float, ...]  # the searched fractions, ascending
    # the engine's own values its configurations take (the space's middle ones; none for SGLang): the
    # memory-flag coverage (`memory_flags.covering_flags`) searches them, the sampler too
    engine_values: tuple[tuple[str, float], ...] = ()


def covering(values: list[float], need: int) -> int:
    """The smallest value at or above ``need``; the largest when none is."""
    above = [v for v in values if v >= need]
    return int(min(above) if above else max(values))


def choose_structure(space: SearchSpace, concurrency: list[int]) -> Structure:
    top = max(concurrency)
    return Structure(
        cuda_graph_max_bs=covering(dim_values(space.cuda_graph_max_bs, integer=True), top),
        max_running_requests=covering(dim_values(space.max_running_requests, integer=True), top),
        fractions=tuple(dim_values(space.mem_fraction_static, integer=False)),
        engine_values=tuple(sorted(space.engine_defaults().items())),
    )


def config_for(structure: Structure, tree: DraftTree | None, fraction: float) -> ServerConfig:
    """The tree with the structure's memory flags; ``tree`` None: the server without speculation."""
    own = dict(structure.engine_values)
    if tree is None:
        return make_config(
            fraction, structure.cuda_graph_max_bs, structure.max_running_requests, engine_values=own
        )
    return make_config(
        fraction,
        structure.cuda_graph_max_bs,
        structure.max_running_requests,
        tree.steps,
        tree.topk,
        tree.draft_tokens,
        engine_values=own,
    )


def has_prior(model: MemoryModel) -> bool:
    """Whether the model knows the node's memory from the models' config.json (the prior), not only from
    the lines it learned: a learned line extrapolates, and cannot know that a draft loaded after the
    target's pools (SGLang <= 0.5.9) stops fitting at high fractions."""
    return isinstance(model, PriorMemoryModel) and model.facts is not None


def fitting_config(
    structure: Structure,
    tree: DraftTree | None,
    model: MemoryModel,
    served: Collection[float] = (),
    unsure_quantile: float = UNSURE_QUANTILE,
) -> ServerConfig | None:
    """The tree at the highest fraction the memory model is confident fits; without the prior, no higher
    than a fraction a launch has ``served`` at; without a confident answer, the ``unsure_quantile``
    fraction among those it does not rule out. None when it rules out every one. ``tree`` None: the server
    without speculation (the baseline), by the same rule."""
    ceiling = max(served) if served and not has_prior(model) else None
    open_: list[float] = []
    for fraction in sorted(structure.fractions, reverse=True):
        config = config_for(structure, tree, fraction)
        prediction = model.predict(config)
        if prediction.confident and prediction.fits and (ceiling is None or fraction <= ceiling + 1e-9):
            return config
        if not prediction.skip:
            open_.append(fraction)
    if not open_:
        return None
    open_.sort()
    return config_for(structure, tree, open_[int(unsure_quantile * (len(open_) - 1))])
