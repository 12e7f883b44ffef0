"""Every configuration a space holds, enumerated through `suggest_config` (one stand-in trial for all)."""

from __future__ import annotations

import optuna
import pytest

from orchestrator.config.draft_tree import DraftTree
from orchestrator.driver.proposal.trees import trees_of
from orchestrator.driver.search.space import config_from_params, params_for, space_configs, suggest_config
from orchestrator.spec.search import Choices, FloatRange, IntRange, SearchSpace


def _space(mem: FloatRange | Choices) -> SearchSpace:
    return SearchSpace(
        mem_fraction_static=mem,
        cuda_graph_max_bs=Choices(choices=[16, 32]),
        max_running_requests=Choices(choices=[8]),
        speculative_num_steps=IntRange(low=1, high=3),
        speculative_eagle_topk=Choices(choices=[1, 2]),
        speculative_num_draft_tokens=IntRange(low=2, high=6, step=2),
    )


def test_every_config_optuna_can_suggest_is_enumerated_once() -> None:
    space = _space(FloatRange(low=0.8, high=0.9, step=0.05))
    configs = space_configs(space)
    assert len(configs) == len(set(configs))
    # Optuna's own trials, sampled at random, never leave the enumeration.
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    for _ in range(60):
        assert suggest_config(study.ask(), space) in configs
    # SGLang's rule is applied by suggest_config itself: top-k 1 draws steps + 1 draft tokens.
    assert {c.speculative_num_draft_tokens for c in configs if c.speculative_eagle_topk == 1} == {2, 3, 4}
    assert {c.mem_fraction_static for c in configs} == {0.8, 0.85, 0.9}


def test_a_continuous_range_must_be_held_or_stepped() -> None:
    space = _space(FloatRange(low=0.8, high=0.9))
    with pytest.raises(ValueError, match="mem_fraction_static"):
        space_configs(space)
    held = space_configs(space, held=("mem_fraction_static",))
    assert {c.mem_fraction_static for c in held} == {0.8}


def test_the_policy_trees_are_the_trees_of_the_whole_space() -> None:
    space = _space(FloatRange(low=0.8, high=0.9, step=0.05))
    every = {DraftTree.of(c) for c in space_configs(space)}
    assert trees_of(space) == sorted(t for t in every if t is not None)


def test_the_space_names_its_optuna_params_by_searched_field_only() -> None:
    # A param spelled as a string beside `SearchedField` drifts from the codec that enqueues and reads
    # the same params (a renamed field would leave the space suggesting under the old name).
    import ast
    from pathlib import Path

    from orchestrator.config.fields import SearchedField
    from orchestrator.driver.loop import restore
    from orchestrator.driver.search import space

    names = {f.value for f in SearchedField}
    for module in (space, restore):
        tree = ast.parse(Path(str(module.__file__)).read_text())
        literals = [
            node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and node.value in names
        ]
        assert literals == [], f"{module.__name__} names Optuna params as strings: {literals}"


def _clipping_space() -> SearchSpace:
    # Draft-token choices 2 and 8: for a small tree (steps 1, top-k 2: 3 draft tokens at most) 8 is
    # clipped to 3, for a large one 2 is clipped up to steps + 1.
    return SearchSpace(
        mem_fraction_static=Choices(choices=[0.8]),
        cuda_graph_max_bs=Choices(choices=[16]),
        max_running_requests=Choices(choices=[8]),
        speculative_num_steps=IntRange(low=1, high=3),
        speculative_eagle_topk=Choices(choices=[1, 2]),
        speculative_num_draft_tokens=Choices(choices=[2, 8]),
        speculative_adaptive=["off", "default"],
    )


def test_every_point_of_the_space_round_trips_through_its_optuna_params() -> None:
    # A clipped draft-token choice read back as the choice drawn (steps 1, top-k 2, 8 draft tokens: a
    # tree that never ran), and a clipped configuration could not be enqueued (3 is no choice).
    space = _clipping_space()
    configs = space_configs(space)
    assert {c.speculative_num_draft_tokens for c in configs if c.speculative_eagle_topk == 2} >= {3, 5, 7}
    for config in configs:
        study = optuna.create_study(storage=optuna.storages.InMemoryStorage())
        study.enqueue_trial(params_for(config, space))
        trial = study.ask()
        if not config.speculative:
            trial.set_user_attr("baseline", True)
        assert suggest_config(trial, space) == config, config.label()
        assert config_from_params(trial.params) == config, config.label()


def test_what_optuna_draws_reads_back_as_the_configuration_that_ran() -> None:
    space = _clipping_space()
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    for _ in range(60):
        trial = study.ask()
        config = suggest_config(trial, space)
        assert config_from_params(trial.params) == config, trial.params
