"""The learned KV-pressure and draft-ceiling rules, checked against the simulated node's own verdicts
(the benchmark oracle walks the simulator's memory plan and replays the trial's KV-pressure probe)."""

from __future__ import annotations

import pytest

from benchmarks.truth.cases import CASES, case_spec
from benchmarks.truth.oracle import Oracle
from orchestrator.driver.memory.bounds import BoundedMemoryModel
from orchestrator.driver.memory.learned import MemoryModel
from orchestrator.driver.search.space import space_configs
from orchestrator.records import FailureStage, ServerConfig, TrialStatus


def _oracle(name: str) -> tuple[Oracle, list[ServerConfig]]:
    case = CASES[name]
    profile = case.load_profile()
    return Oracle(case_spec(case, gpus=profile.gpu_count), profile), space_configs(case.space)


@pytest.fixture(scope="module")
def tight() -> tuple[Oracle, list[ServerConfig]]:
    return _oracle("tight")


def test_kv_pressure_sets_a_floor_on_tokens_per_request(tight: tuple[Oracle, list[ServerConfig]]) -> None:
    oracle, grid = tight
    ok = next(c for c in grid if oracle.evaluate(c).status is TrialStatus.OK)
    pressed = [c for c in grid if oracle.evaluate(c).status is TrialStatus.KV_PRESSURE]
    failed = max(pressed, key=lambda c: (c.mem_fraction_static, -c.max_running_requests))
    plain, bounded = MemoryModel(), BoundedMemoryModel()
    for i, config in enumerate((ok, failed)):
        plain.observe(i, oracle.evaluate(config).result())
        bounded.observe(i, oracle.evaluate(config).result())
    assert bounded.pressure
    # Same fraction, more running requests: fewer tokens each, so it retracts as well.
    worse = [
        c
        for c in grid
        if c.mem_fraction_static == failed.mem_fraction_static
        and c.max_running_requests > failed.max_running_requests
        and c.speculative_num_steps == failed.speculative_num_steps
        and c.speculative_eagle_topk == failed.speculative_eagle_topk
        and c.speculative_num_draft_tokens == failed.speculative_num_draft_tokens
    ]
    for config in [*worse, failed]:
        prediction = bounded.predict(config)
        assert prediction.skip and prediction.stage is FailureStage.UNDER_LOAD, config
        assert oracle.evaluate(config).status.infeasible  # the node agrees
        assert not plain.predict(config).skip  # the plain model would launch it
    # What the node runs is never ruled out by this rule.
    runs = [c for c in grid if oracle.evaluate(c).status is TrialStatus.OK]
    wrongly = [c for c in runs if bounded.predict(c).stage is FailureStage.UNDER_LOAD]
    assert not wrongly


def test_a_draft_that_did_not_fit_sets_a_ceiling_on_the_fraction() -> None:
    oracle, grid = _oracle("kimi-k25-rtxpro6000")  # SGLang <= 0.5.9 rules: the draft comes last
    draft_side = [
        c
        for c in grid
        if oracle.evaluate(c).status is TrialStatus.OOM
        and oracle.evaluate(c).failure is not None
        and oracle.evaluate(c).failure.stage in (FailureStage.WEIGHT_LOADING, FailureStage.KV_ALLOCATION)  # type: ignore[union-attr]
        and oracle.evaluate(c).memory.kv_cache_tokens
    ]
    assert draft_side
    lowest = min(draft_side, key=lambda c: c.mem_fraction_static)
    model = BoundedMemoryModel()
    model.observe(0, oracle.evaluate(lowest).result())
    assert model.draft_ceiling == pytest.approx(lowest.mem_fraction_static)
    above = [c for c in grid if c.mem_fraction_static >= lowest.mem_fraction_static and c.speculative]
    assert above and all(model.predict(c).skip for c in above)
    # every configuration at or above the ceiling does fail on the node
    assert all(oracle.evaluate(c).status.infeasible for c in above)
    below = [c for c in grid if c.mem_fraction_static < lowest.mem_fraction_static]
    assert not any("left the draft no room" in model.predict(c).reason for c in below)


def test_a_target_pool_that_did_not_fit_sets_no_ceiling(tight: tuple[Oracle, list[ServerConfig]]) -> None:
    """A KV allocation failure with no target pool at all is the target's own (too low a fraction): it is
    the base model's floor, not a ceiling on the fraction."""
    oracle, grid = tight
    low = next(
        c
        for c in grid
        if oracle.evaluate(c).status is TrialStatus.OOM and not oracle.evaluate(c).memory.kv_cache_tokens
    )
    model = BoundedMemoryModel()
    model.observe(0, oracle.evaluate(low).result())
    assert model.draft_ceiling is None
    assert model.predict(low).skip  # the base model's floor still applies


def test_every_kv_pressure_failure_together_rules_out_nothing_that_runs(
    tight: tuple[Oracle, list[ServerConfig]],
) -> None:
    oracle, grid = tight
    model = BoundedMemoryModel()
    ok = next(c for c in grid if oracle.evaluate(c).status is TrialStatus.OK)
    model.observe(0, oracle.evaluate(ok).result())
    pressed = [c for c in grid if oracle.evaluate(c).status is TrialStatus.KV_PRESSURE]
    for i, config in enumerate(pressed, 1):
        model.observe(i, oracle.evaluate(config).result())
    runs = [c for c in grid if oracle.evaluate(c).status is TrialStatus.OK]
    assert not [c for c in runs if model.predict(c).stage is FailureStage.UNDER_LOAD]
    assert all(model.predict(c).skip for c in pressed)
