"""A small finite space is exhausted long before the budget: the sweep stops asking.

Before, once every configuration was measured the sampler's asks were answered from the record one by
one until 20 x the budget had been repeated: a 12-configuration space with a budget of 40 asked 2335
trials of Optuna (each ask of TPE reading every trial so far), a minute of the driver and a study full of
repeats.
"""

from __future__ import annotations

import optuna
from optuna.storages import InMemoryStorage

from benchmarks.search.oracle_sweep import run_on_oracle
from benchmarks.truth.cases import CASES, case_spec
from benchmarks.truth.oracle import Oracle
from orchestrator.driver.loop.outcome import StopReason
from orchestrator.driver.loop.sweep import Sweep
from orchestrator.driver.search.space import space_configs
from orchestrator.driver.store.study import open_study
from orchestrator.sim.profile import SimProfile, load_profile
from orchestrator.spec.search import Choices
from orchestrator.spec.sweep_spec import SweepSpec
from tests.driver.loop.test_driver_decisions import InProcessExecutor, _sweep
from tests.driver.loop.test_twins import TwoNodeExecutor


def _small_space(max_running: list[float], steps: list[float]) -> tuple[SweepSpec, SimProfile]:
    """The measured 8B case's spec over a few chain trees at one fraction and graph batch, and its profile."""
    bench = CASES["h200-llama8b"]
    space = bench.space.model_copy(
        update={
            "mem_fraction_static": Choices(choices=[0.85]),
            "cuda_graph_max_bs": Choices(choices=[32]),
            "max_running_requests": Choices(choices=max_running),
            "speculative_num_steps": Choices(choices=steps),
            "speculative_eagle_topk": Choices(choices=[1]),
        }
    )
    return case_spec(bench, gpus=1).model_copy(update={"search": space}), load_profile(bench.name)


def _run(spec: SweepSpec, executor: InProcessExecutor, name: str, policy: bool) -> tuple[optuna.Study, Sweep]:
    """The product's sweep of `spec` on `executor`, budget 40, as the CLI runs it (`policy`: the proposal
    policy in front of the sampler; without it the sampler alone proposes)."""
    study = open_study(spec, name, InMemoryStorage(), resume=False)
    sweep = _sweep(spec, study, executor, n_trials=40, proposals=policy)
    sweep.journal.folder = None
    run_on_oracle(sweep)
    return study, sweep


def test_a_sweep_stops_asking_once_every_configuration_of_its_space_is_settled() -> None:
    spec, profile = _small_space(max_running=[16, 32], steps=[2, 3])
    assert len(space_configs(spec.search)) == 4
    # The sampler alone (no proposal policy): it can only repeat a configuration once all are settled.
    study, sweep = _run(spec, InProcessExecutor(Oracle(spec, profile)), "exhausted", policy=False)
    assert sweep.outcome.stop_reason is StopReason.SPACE_EXHAUSTED
    assert len(study.trials) < 40, len(study.trials)  # each configuration once: never hundreds of repeats
    # With the policy the race runs once every configuration is launched, and the policy stops it.
    study, sweep = _run(spec, InProcessExecutor(Oracle(spec, profile)), "raced", policy=True)
    assert sweep.outcome.stop_reason is StopReason.ANSWER_KNOWN
    assert len(study.trials) < 40, len(study.trials)


def test_on_two_nodes_the_last_server_running_is_not_drawn_again_and_again() -> None:
    """A finite space's last unsettled server runs on one node; the other node's asks could only draw it
    again, to wait for its record. None is asked until it ends (before, the sampler was asked until the
    repeat limit, 20 x the budget, and the study filled with waiting draws)."""
    spec, profile = _small_space(max_running=[32], steps=[3])
    assert len(space_configs(spec.search)) == 1
    study, sweep = _run(spec, TwoNodeExecutor(Oracle(spec, profile)), "last-running", policy=False)
    assert sweep.outcome.stop_reason is StopReason.SPACE_EXHAUSTED
    assert len(study.trials) == 1, len(study.trials)
