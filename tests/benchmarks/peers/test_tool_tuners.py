"""SGLang's auto_benchmark and vLLM's auto_tune.sh as their code runs them, and SGLang's own defaults."""

from __future__ import annotations

import math

import pytest

from benchmarks.launches.noisy import Launcher
from benchmarks.peers.auto_benchmark import auto_benchmark, build_candidates
from benchmarks.peers.sglang_defaults import sglang_defaults, sglang_tree, usual_tree
from benchmarks.peers.vllm_auto_tune import vllm_auto_tune
from benchmarks.truth.cases import CASES, case_spec
from benchmarks.truth.oracle import Oracle
from orchestrator.driver.answer.noise import Regime
from orchestrator.driver.search.space import space_configs
from orchestrator.records import ServerConfig
from orchestrator.sim.profile import load_profile
from orchestrator.spec.search import IntRange

# The product's sampler uses Optuna's `group` option, which Optuna still calls experimental.
pytestmark = pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")


def test_sglang_defaults_follow_the_profile() -> None:
    case = CASES["kimi-k25-rtxpro6000"]
    oracle = Oracle(case_spec(case, gpus=8), load_profile(case.name))
    # Kimi: SGLang's auto fraction with EAGLE and the vision reduction is about 0.76; requests reset to 48.
    assert sglang_defaults(oracle) == (0.76, 512, 48)


@pytest.fixture(scope="module")
def tight() -> tuple[Oracle, list[ServerConfig]]:
    case = CASES["tight"]
    return Oracle(case_spec(case, gpus=1), load_profile(case.name)), space_configs(case.space)


def test_build_candidates_is_sglang_tier_two() -> None:
    """The base, then the product of the first three flags (first three values each), then the others one
    at a time; duplicates dropped; at most 8 including the base."""
    space = [("a", [1.0, 2.0, 3.0, 4.0]), ("b", [1.0, 2.0]), ("c", [1.0])]
    got = build_candidates({}, space)
    assert got == [
        {},
        {"a": 1.0, "b": 1.0, "c": 1.0},
        {"a": 1.0, "b": 2.0, "c": 1.0},
        {"a": 2.0, "b": 1.0, "c": 1.0},
        {"a": 2.0, "b": 2.0, "c": 1.0},
        {"a": 3.0, "b": 1.0, "c": 1.0},
        {"a": 3.0, "b": 2.0, "c": 1.0},
    ]  # a's fourth value is cut by tier 2
    tail = build_candidates({"a": 1.0}, [("a", [1.0]), ("b", [1.0]), ("c", [1.0]), ("d", [5.0, 6.0])])
    assert tail == [{"a": 1.0}, {"a": 1.0, "b": 1.0, "c": 1.0}, {"a": 1.0, "d": 5.0}, {"a": 1.0, "d": 6.0}]
    big = build_candidates({}, [("a", [1.0, 2.0, 3.0]), ("b", [1.0, 2.0, 3.0]), ("c", [1.0, 2.0, 3.0])])
    assert len(big) == 8 and big[0] == {} and all(c["a"] == 1.0 for c in big[1:])
    assert (
        sglang_tree(3, 1, 8) == (3, 1, 4)
        and sglang_tree(2, 4, 8) == (2, 4, 8)
        and sglang_tree(1, 2, 8) == (1, 2, 8)
    )


def test_auto_benchmark_runs_its_speculative_stage_on_the_best_base(
    tight: tuple[Oracle, list[ServerConfig]],
) -> None:
    oracle, grid = tight
    launcher = Launcher(oracle, 3, budget_gpu_s=math.inf, max_launches=100, regime=Regime.GPU_BOUND)
    run = auto_benchmark(launcher, grid)
    base = [lc for lc in run.launches if not lc.config.speculative]
    spec = [lc for lc in run.launches if lc.config.speculative]
    assert len(base) == 8 and 1 <= len(spec) <= 8 and len(run.launches) == len(base) + len(spec)
    assert run.launches[: len(base)] == base  # the base stage first
    best = max((lc for lc in base if lc.objective is not None), key=lambda lc: lc.objective or 0.0)
    memory = {
        (lc.config.mem_fraction_static, lc.config.cuda_graph_max_bs, lc.config.max_running_requests)
        for lc in spec
    }
    flags = (best.config.mem_fraction_static, best.config.cuda_graph_max_bs, best.config.max_running_requests)
    # the first base sets no flag: if it wins, SGLang's speculative defaults fill them in again
    assert memory == {sglang_defaults(oracle) if best is base[0] else flags}
    # its answer is the best single draw over both stages
    top = max((lc for lc in run.launches if lc.objective is not None), key=lambda lc: lc.objective or 0.0)
    assert run.launches[-1].recommend == top.config


def test_vllm_auto_tune_steps_the_fraction_down_then_grids_the_batch_flags(
    tight: tuple[Oracle, list[ServerConfig]],
) -> None:
    oracle, grid = tight
    space = oracle.spec.search
    launcher = Launcher(oracle, 1, budget_gpu_s=math.inf, max_launches=100, regime=Regime.GPU_BOUND)
    run = vllm_auto_tune(launcher, grid)
    started = next(i for i, lc in enumerate(run.launches) if lc.failed_at in ("", "under_load"))
    probes = run.launches[: started + 1]
    assert probes[-1].objective is None  # start_server only: nothing benchmarked
    first = run.launches[0].config
    assert first.mem_fraction_static == pytest.approx(space.mem_fraction_static.high)  # 0.96 <= 0.98
    assert first.cuda_graph_max_bs == max(space.cuda_graph_max_bs.choices)
    assert first.max_running_requests == max(space.max_running_requests.choices)
    chosen = probes[-1].config.mem_fraction_static
    fractions = [lc.config.mem_fraction_static for lc in run.launches[: len(probes)]]
    assert fractions == sorted(fractions, reverse=True) and len(set(fractions)) == len(fractions)
    rest = run.launches[len(probes) :]
    cells = {(lc.config.cuda_graph_max_bs, lc.config.max_running_requests) for lc in rest}
    assert (
        len(rest)
        == len(cells)
        == len(space.cuda_graph_max_bs.choices) * len(space.max_running_requests.choices)
    )
    assert {lc.config.mem_fraction_static for lc in rest} == {chosen}
    trees = {
        (
            lc.config.speculative_num_steps,
            lc.config.speculative_eagle_topk,
            lc.config.speculative_num_draft_tokens,
        )
        for lc in run.launches
    }
    assert trees == {usual_tree(oracle)}  # no speculation tuning


def test_auto_benchmark_lists_only_values_inside_a_range_its_step_does_not_divide() -> None:
    # 8..30 in steps of 8 is 8, 16, 24: a tier-2 user lists no 32, which the range does not hold.
    case = CASES["tight"]
    space = case.space.model_copy(update={"max_running_requests": IntRange(low=8, high=30, step=8)})
    spec = case_spec(case, gpus=1).model_copy(update={"search": space})
    oracle = Oracle(spec, load_profile(case.name))
    launcher = Launcher(oracle, 3, budget_gpu_s=math.inf, max_launches=100, regime=Regime.GPU_BOUND)
    run = auto_benchmark(launcher, space_configs(space))
    assert {lc.config.max_running_requests for lc in run.launches} <= {8, 16, 24}
