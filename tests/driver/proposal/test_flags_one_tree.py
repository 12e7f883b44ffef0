"""A space with fewer trees than the model needs: the memory flags are what is left to search.

The H200 grid (`trials/h200-8b-grid.yaml`, measured in tests/fixtures/sglang/0.5.17/llama8b-grid) holds
one tree (s2k1d3) and 3 fractions x graph bs {16, 64, 256} x max running {16, 256}. At the workload's
concurrency 32, graph bs 16 or max running 16 throttles the server (1068-1599 tok/s measured against
2763-2802 for every other cell). Once its one tree was launched the policy used to hand the space to the
sampler, whose start-up trials are random: about half of the search's launches went to throttled cells
(and cells SGLang makes the same server), and the best measured cell (0.5, 256, 256) was launched in 1 of
20 seeds of the replay. The policy now launches the leader's tree at the flags that cover the workload.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import replace
from pathlib import Path

from pydantic import TypeAdapter

from benchmarks.launches.noisy import Launcher
from benchmarks.search.efficiency import optimum
from benchmarks.search.specsweep import VARIANTS, run_sweep
from benchmarks.truth.cases import case_spec
from benchmarks.truth.measured_grid import GRID_FOLDER, GRID_SPEC, ReplayOracle, load_records, same_start
from benchmarks.truth.oracle import Oracle
from benchmarks.truth.real_derived import real_derived_cases
from orchestrator.driver.answer.noise import Regime
from orchestrator.driver.loop.node_memory import memory_model_for
from orchestrator.driver.loop.outcome import StopReason
from orchestrator.driver.proposal.memory_flags import covering_flags
from orchestrator.driver.proposal.policy import Action, ProposalPolicy
from orchestrator.driver.proposal.structure import choose_structure
from orchestrator.driver.search.space import space_configs
from orchestrator.driver.store.trial_attrs import TrialAttr
from orchestrator.records import ServerConfig, TrialRecord
from orchestrator.spec.sweep_spec import SweepSpec, load_spec

_RECORD = TypeAdapter(TrialRecord)
TOP = 32  # the grid workload's highest concurrency


def _grid_record(fraction: float, graphs: int, running: int) -> TrialRecord:
    for path in sorted((GRID_FOLDER / "records").glob("*.json")):
        record = _RECORD.validate_python(json.loads(Path(path).read_text()))
        c = record.result.config
        flags = (c.mem_fraction_static, c.cuda_graph_max_bs, c.max_running_requests)
        if flags == (fraction, graphs, running) and c.speculative_num_steps is not None:
            return record
    raise LookupError((fraction, graphs, running))


def _covers(config: ServerConfig) -> bool:
    return config.cuda_graph_max_bs >= TOP and config.max_running_requests >= TOP


def test_after_the_only_tree_the_policy_searches_the_flags_that_cover_the_workload() -> None:
    spec = same_start(load_spec(GRID_SPEC))
    model, _ = memory_model_for(spec, None)
    policy = ProposalPolicy(spec)
    records = [_grid_record(0.8, 64, 256)]  # what the structure launches first (measured on the H200)
    model.observe(records[0].number, records[0].result)
    for _ in range(5):  # the five other cells that cover concurrency 32, each once, as measured
        decision = policy.decide(records, [], model)
        assert decision.action is Action.PROPOSE, decision
        config = decision.config
        assert config is not None and _covers(config), decision
        assert config not in {r.result.config for r in records}
        assert policy.decide(records, [config], model).action is Action.PASS  # waits for it in flight
        c = config
        record = _grid_record(c.mem_fraction_static, c.cuda_graph_max_bs, c.max_running_requests)
        model.observe(record.number, record.result)
        records.append(record)
    assert {(r.result.config.mem_fraction_static, r.result.config.cuda_graph_max_bs) for r in records} == {
        (f, g) for f in (0.5, 0.8, 0.95) for g in (64, 256)
    }


def test_on_the_replayed_grid_the_sweep_launches_nothing_that_throttles_the_workload() -> None:
    spec = same_start(load_spec(GRID_SPEC))
    oracle = ReplayOracle(spec, load_records(GRID_FOLDER))
    typical = statistics.median(e.seconds() for e in oracle.measured.values() if e.objective is not None)
    for seed in range(4):
        launcher = Launcher(oracle, seed, budget_gpu_s=8 * typical, max_launches=24, regime=Regime.GPU_BOUND)
        sweep = run_sweep(VARIANTS["specsweep_no_baseline"], launcher)
        launched = [r.result.config for r in sweep.outcome.records if r.result.node_id]
        assert launched and all(_covers(c) for c in launched), [c.label() for c in launched]
        assert math.isfinite(launcher.spent_s)


def test_once_every_flag_is_launched_the_race_runs_and_a_close_baseline_is_raced() -> None:
    """The real-derived case whose optimum is the server without speculation by 12.8 % (gpt-oss-120b's
    published chain acceptance on the H200's measured steps: one tree, 12 memory points), on a noisy
    node (the overhead-bound spread, 7 % a launch). Once every flag was launched the policy handed the
    space to the sampler and the sweep ran out of configurations: no race, no confirmation, and the
    answer the luckiest of a dozen single draws, speculative in 12 of 20 seeds (11.3 % short). Now the
    race runs, the baseline in it while it is within the noise of the leader, and its repeats are
    paid from the budget."""
    case = next(c for c in real_derived_cases() if "specdrift" in c.name)
    profile = case.load_profile()
    oracle = Oracle(case_spec(case, gpus=profile.gpu_count), profile)
    configs = space_configs(case.space)
    evaluations = [oracle.evaluate(c) for c in configs]
    best = optimum(oracle, configs, {e.config: e.objective for e in evaluations if e.objective is not None})
    typical = statistics.median(e.seconds() for e in evaluations if e.objective is not None) * oracle.gpus
    right = raced = 0
    for seed in range(4_200_000, 4_200_010):
        launcher = Launcher(
            oracle, seed, budget_gpu_s=40 * typical, max_launches=120, regime=Regime.OVERHEAD_BOUND
        )
        sweep = run_sweep(VARIANTS["specsweep"], launcher)
        assert sweep.outcome.stop_reason is not StopReason.SPACE_EXHAUSTED, seed
        answer = launcher.launches[-1].recommend
        assert answer is not None
        right += (oracle.evaluate(answer).objective or 0.0) >= 0.98 * best
        bases = [t for t in sweep.study.get_trials(deepcopy=False) if t.user_attrs.get(TrialAttr.BASELINE)]
        raced += len(bases) > 1
        assert all(TrialAttr.CONFIRM_OF in t.user_attrs for t in bases[1:])
    assert right >= 8 and raced >= 5, (right, raced)


def test_the_flag_coverage_never_launches_a_server_it_launched_under_another_name() -> None:
    """Graph bs 64 under max running 32 is SGLang's server of graph bs 32 (it captures graphs up to max
    running): once the leader ran at 64, the coverage's (32, 32) measures nothing new. The coverage once
    deduplicated its own options by that rule but compared them with the launched ones by name, and
    proposed the leader's own server again."""
    data = load_spec(GRID_SPEC).model_dump(mode="json")
    data["search"].update(
        mem_fraction_static={"choices": [0.8]},
        cuda_graph_max_bs={"choices": [32, 64]},
        max_running_requests={"choices": [32]},
    )
    data["memory"]["prior"] = False
    spec = same_start(SweepSpec.model_validate(data))
    model, _ = memory_model_for(spec, None)
    structure = choose_structure(spec.search, spec.workload.concurrency)
    leader = _grid_record(0.8, 64, 256).result.config
    leader = replace(leader, cuda_graph_max_bs=64, max_running_requests=32)
    assert covering_flags(spec, structure, leader, [leader], model) is None
