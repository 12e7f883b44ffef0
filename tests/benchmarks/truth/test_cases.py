"""The cases' grids are exactly what the study can propose; generated cases are reproducible."""

from __future__ import annotations

import optuna
import pytest

from benchmarks.harness.quiet import quiet_optuna
from benchmarks.truth.generated import feasible_share, generate
from orchestrator.driver.search.space import space_configs, suggest_config
from orchestrator.spec.search import Choices, FloatRange, IntRange, SearchSpace

# The product's sampler uses Optuna's `group` option, which Optuna still calls experimental.
pytestmark = pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")

TINY_SPACE = SearchSpace(
    mem_fraction_static=FloatRange(low=0.80, high=0.90, step=0.05),
    cuda_graph_max_bs=Choices(choices=[8, 16]),
    max_running_requests=Choices(choices=[8]),
    speculative_num_steps=IntRange(low=1, high=2),
    speculative_eagle_topk=Choices(choices=[1, 2]),
    speculative_num_draft_tokens=IntRange(low=2, high=4),
)


def test_grid_is_exactly_what_suggest_config_can_propose() -> None:
    grid = space_configs(TINY_SPACE)
    # Per memory point: top-k 1 gives d = s + 1 (2 trees); top-k 2 gives d in [s+1, 2s+1] within 2..4:
    # s1 -> 2, 3 and s2 -> 3, 4. So 6 trees x 3 fractions x 2 graph sizes.
    assert len(grid) == len(set(grid)) == 6 * 3 * 2
    topk1 = [c for c in grid if c.speculative_eagle_topk == 1]
    assert all(c.speculative_num_draft_tokens == (c.speculative_num_steps or 0) + 1 for c in topk1)
    quiet_optuna()
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1))
    sampled = {suggest_config(study.ask(), TINY_SPACE) for _ in range(300)}
    assert sampled == set(grid)


def test_grid_refuses_a_continuous_range() -> None:
    space = TINY_SPACE.model_copy(update={"mem_fraction_static": FloatRange(low=0.8, high=0.9)})
    with pytest.raises(ValueError, match="step"):
        space_configs(space)


@pytest.mark.slow  # seconds of real time (a simulated server, a sweep or a wait); left out of `make unit`
def test_generated_cases_are_reproducible_and_hit_their_feasible_share() -> None:
    first = generate(7, 1, heldout=True)
    again = generate(7, 1, heldout=True)
    assert [c.profile for c in first] == [c.profile for c in again] and first[0].heldout
    assert 0.15 <= feasible_share(first[0]) <= 0.35  # the first case's target: 25 % feasible
