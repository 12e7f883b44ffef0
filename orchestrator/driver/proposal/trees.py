"""The speculative trees a search space holds, and the values of each searched dimension.

A tree (`draft_tree.DraftTree`) is (steps, top-k, draft tokens) after SGLang's rules
(`space.suggest_config`): with top-k 1 the draft tokens are steps + 1, with top-k > 1 they are clipped into
[steps + 1, top-k x steps + 1]. The trees are enumerated through `suggest_config` itself
(`space.space_configs`), so the policy proposes exactly what the study can hold.
"""

from __future__ import annotations

from orchestrator.config.draft_tree import DraftTree
from orchestrator.driver.search.space import space_configs
from orchestrator.spec.search import Choices, FloatRange, IntRange, SearchSpace, grid_values, stepped

# A continuous fraction range is searched by the policy on this grid (SGLang reads two decimals well).
FRACTION_GRID = 0.01


def dim_values(dim: FloatRange | IntRange | Choices, *, integer: bool = False) -> list[float]:
    """Every value of a dimension, ascending (a continuous float range on `FRACTION_GRID`)."""
    values = grid_values(dim, integer=integer)
    if values is None:
        assert isinstance(dim, FloatRange)  # only a float range without a step is continuous
        return stepped(dim.low, dim.high, FRACTION_GRID)
    return values


# Not enumerated: the memory values are the structure's choice, adaptive speculation changes no tree, and
# neither does an engine's own value.
_NOT_TREE = ("mem_fraction_static", "cuda_graph_max_bs", "max_running_requests", "speculative_adaptive")


def trees_of(space: SearchSpace) -> list[DraftTree]:
    """Every distinct tree `suggest_config` can return for `space` (adaptive speculation aside)."""
    trees = {DraftTree.of(config) for config in space_configs(space, held=(*_NOT_TREE, *space.engine))}
    return sorted(tree for tree in trees if tree is not None)
