"""The memory prior inside the sweep: what cannot fit is never launched, from the first trial on, and
the launches correct the prior."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest

from benchmarks.launches.noisy import Launcher
from benchmarks.search.oracle_sweep import oracle_sweep, run_on_oracle
from benchmarks.truth.oracle import Oracle
from orchestrator.driver.memory.build import build_memory_model
from orchestrator.driver.memory.facts import facts_from_shapes
from orchestrator.driver.memory.learned import Prediction
from orchestrator.driver.memory.prior import estimate
from orchestrator.driver.memory.prior_model import PriorMemoryModel, from_prior
from orchestrator.footprint.shape import load_shape
from orchestrator.records import (
    FailureStage,
    GpuSample,
    MemoryAccount,
    ServerConfig,
    TrialResult,
    TrialStatus,
)
from orchestrator.sim.profile import load_profile
from orchestrator.spec.sweep_spec import MemorySpec, load_spec

ROOT = Path(__file__).resolve().parents[3]
TARGET, DRAFT = ROOT / "trials/models/llama3-8b-shape", ROOT / "trials/models/llama3-8b-eagle3-shape"
H200_MIB = 143771.0


def _oom_launches(prior: bool, trials: int = 24, proposals: bool = True) -> tuple[int, int]:
    """(OOM launches, predicted OOMs) of the demo spec's sweep on its simulated node, in process; with
    ``proposals`` off, TPE alone proposes (it asks for configurations the prior must refuse)."""
    spec = load_spec(ROOT / "trials/demo.yaml")
    spec = spec.model_copy(update={"memory": MemorySpec(prior=prior)})
    assert spec.simulated is not None and isinstance(spec.simulated.profile, str)
    oracle = Oracle(spec, load_profile(spec.simulated.profile))
    launcher = Launcher(oracle, seed=0, budget_gpu_s=math.inf, max_launches=trials + 2)
    sweep = oracle_sweep(spec, launcher, n_trials=trials)
    if not proposals:
        sweep.proposals = None
    records = run_on_oracle(sweep)
    launched = [r for r in records if r.result.node_id]
    ooms = sum(1 for r in launched if r.result.status is TrialStatus.OOM)
    return ooms, sum(1 for r in records if r.result.status is TrialStatus.PREDICTED_OOM)


@pytest.mark.slow  # seconds of real time (a simulated server, a sweep or a wait); left out of `make unit`
def test_the_demo_sweep_launches_no_oom_with_the_prior() -> None:
    # TPE alone asks for configurations that cannot fit: the prior refuses them before any launch
    ooms, predicted = _oom_launches(prior=True, proposals=False)
    assert ooms == 0 and predicted > 0
    # The same sweep learning only (as before the prior) launches several.
    without, _ = _oom_launches(prior=False, proposals=False)
    assert without >= 3
    # The proposal policy picks its memory flags from the prior: nothing it proposes needs refusing, and
    # without the prior it still launches an OOM to learn from.
    assert _oom_launches(prior=True) == (0, 0)
    assert _oom_launches(prior=False)[0] >= 1


def _eight_b() -> PriorMemoryModel:
    facts = facts_from_shapes(load_shape(TARGET), load_shape(DRAFT), H200_MIB, 1)
    return PriorMemoryModel(1, 8, facts)


def test_before_any_launch_the_floor_and_the_graph_ceiling_are_refused() -> None:
    model = _eight_b()
    low = model.predict(ServerConfig(0.10, 64, 64, 3, 1, 4))
    assert low.skip and low.stage is FailureStage.KV_ALLOCATION and from_prior(low)
    assert "minimum viable 0.1238" in low.reason
    assert "(14.97 + 2.14 GiB)" in low.reason and " GB" not in low.reason  # `specsweep fit`'s unit
    high = model.predict(ServerConfig(0.98, 256, 256, 4, 2, 8))
    assert high.skip and high.stage is FailureStage.DRAFT_GRAPH_CAPTURE
    assert from_prior(high)
    assert high.figures()["graph_need_gb"] > high.figures()["graph_room_gb"]  # recorded with the figures
    assert not model.predict(ServerConfig(0.85, 64, 64, 3, 1, 4)).skip


def test_whether_the_prior_refused_is_a_value_not_the_reason_s_first_word() -> None:
    """A bound learned from launches may word its reason as it likes (here, like the prior's): a
    known-good configuration is still launched against it."""
    learned = Prediction(
        False, True, FailureStage.KV_ALLOCATION, None, None, None, "prior: trials 3 and 5 OOMed"
    )
    assert learned.skip and not from_prior(learned)


def _ok(config: ServerConfig, graphs_gb: float, facts_pre: float) -> TrialResult:
    after_kv = facts_pre * (1 - config.mem_fraction_static) - 0.08
    memory = MemoryAccount(
        avail_at_start_gb=facts_pre,
        weights_gb=14.98,
        draft_weights_gb=2.14,
        kv_cache_tokens=800_000,
        kv_cache_gb=97.66,
        draft_kv_cache_gb=3.05,
        avail_after_kv_gb=after_kv,
        avail_end_gb=after_kv - graphs_gb,
    )
    return TrialResult(config, TrialStatus.OK, "node", (), memory=memory)


def test_a_launch_that_needed_less_than_predicted_neither_scales_the_graphs_down_nor_widens_them() -> None:
    """A launch whose graphs took a third of the prediction (the server without speculation on the H200
    shapes measures 0.3 of it: the tiny model's set-up is mostly not spent there) says nothing of what a
    larger tree's graphs take per token: scaled down by it, the prior promised the 8B shape's s4k4d16 at
    0.97 0.3 GiB it did not have. What it measured corrects what start-up leaves, not the graph check."""
    model = _eight_b()
    assert model.facts is not None
    near_ceiling = ServerConfig(0.96, 256, 256, 4, 2, 8)
    assert model.predict(near_ceiling).skip
    measured = ServerConfig(0.85, 256, 256, 4, 2, 8)
    predicted = estimate(model.facts, measured).graph_gb
    model.observe(1, _ok(measured, predicted / 3, model.facts.pre_gib))
    assert model.graph_scale is None
    assert model.predict(near_ceiling).skip
    left = model.left_after_start(near_ceiling)
    assert left is not None and left > estimate(model.facts, near_ceiling).left_gb


def test_a_launch_that_left_less_than_predicted_narrows_what_fits() -> None:
    model = _eight_b()
    assert model.facts is not None
    config = ServerConfig(0.9, 128, 128, 3, 1, 4)
    assert not model.predict(config).skip
    est = estimate(model.facts, config)
    # started, but its pools took 0.2 GiB more than predicted (the graphs what was predicted), so it
    # ended with 0.2 less: at a fraction whose predicted left is within that of the margin, the same tree
    # no longer fits
    ok = _ok(config, 0.0, model.facts.pre_gib).memory
    assert ok.avail_after_kv_gb is not None
    memory = replace(ok, avail_after_kv_gb=ok.avail_after_kv_gb - 0.2, avail_end_gb=est.left_gb - 0.2)
    model.observe(1, TrialResult(config, TrialStatus.OK, "node", (), memory=memory))
    assert model.left_after_start(config) == pytest.approx(est.left_gb - 0.2, abs=0.01)
    facts = model.facts

    def spare(fraction: float) -> float:  # what the prior alone leaves above the launch margin
        e = estimate(facts, replace(config, mem_fraction_static=fraction))
        return e.left_gb - (facts.graph_margin_gib + facts.graph_margin_rel * e.graph_gb)

    tight = next(f / 1000 for f in range(990, 850, -1) if 0.0 < spare(f / 1000) < 0.2)
    assert not PriorMemoryModel.predict(_eight_b(), replace(config, mem_fraction_static=tight)).skip
    assert model.predict(replace(config, mem_fraction_static=tight)).skip


def test_a_graph_oom_the_prior_did_not_expect_raises_its_graph_costs() -> None:
    model = _eight_b()
    assert model.facts is not None
    config = ServerConfig(0.9, 128, 128, 3, 1, 4)
    assert not model.predict(config).skip
    room = model.facts.pre_gib * 0.1 - 0.08
    memory = MemoryAccount(avail_at_start_gb=model.facts.pre_gib, avail_after_kv_gb=room, kv_cache_tokens=1)
    from orchestrator.records import Failure, FailureKind

    failure = Failure(FailureStage.DRAFT_GRAPH_CAPTURE, FailureKind.OOM, "CUDA out of memory")
    model.observe(1, TrialResult(config, TrialStatus.OOM, "node", (), failure=failure, memory=memory))
    assert model.predict(config).skip


def test_the_gpu_memory_comes_from_the_first_launch_when_the_driver_sees_no_gpu() -> None:
    model, warnings = build_memory_model(
        1, 8, use_prior=True, profile=None, target_dir=str(TARGET), draft_dir=str(DRAFT), gpu_memory_mib=None
    )
    assert not warnings
    if model.facts is None:  # a driver without GPUs (as here): the first launch's GPU check tells
        baseline = ServerConfig(0.85, 64, 64)
        gpu = (GpuSample(0, H200_MIB, 615.0),)
        model.observe(0, replace(TrialResult(baseline, TrialStatus.OK, "node", ()), gpu_before=gpu))
    assert model.facts is not None and model.facts.gpu_total_mib == H200_MIB
    assert model.predict(ServerConfig(0.10, 64, 64, 3, 1, 4)).skip


def test_a_stated_gpu_memory_the_nodes_do_not_have_is_warned_of_and_the_nodes_win(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A spec written for an H200 (memory.gpu_memory_mib: 143771) ran on an H100: the prior must predict
    for the node's 81559 MiB, and say so where the user looks, naming the key and the fix."""
    model, _ = build_memory_model(
        1,
        8,
        use_prior=True,
        profile=None,
        target_dir=str(TARGET),
        draft_dir=str(DRAFT),
        gpu_memory_mib=H200_MIB,
    )
    h100 = (GpuSample(0, 81559.0, 480.0),)
    with caplog.at_level("WARNING", logger="orchestrator.driver.memory.prior_model"):
        model.observe(
            0, replace(TrialResult(ServerConfig(0.85, 64, 64), TrialStatus.OK, "node", ()), gpu_before=h100)
        )
    assert model.facts is not None and model.facts.gpu_total_mib == 81559.0
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warned) == 1
    assert "memory.gpu_memory_mib" in warned[0] and "143771" in warned[0] and "81559" in warned[0]
    caplog.clear()
    model.observe(
        1, replace(TrialResult(ServerConfig(0.85, 64, 64), TrialStatus.OK, "node", ()), gpu_before=h100)
    )
    assert not [r for r in caplog.records if r.levelname == "WARNING"]  # said once, not every trial


def test_an_unreadable_config_json_warns_naming_the_file_and_field_and_learning_goes_on(
    tmp_path: Path,
) -> None:
    (tmp_path / "config.json").write_text('{"architectures": ["LlamaForCausalLM"], "model_type": "llama"}')
    model, warnings = build_memory_model(
        1,
        None,
        use_prior=True,
        profile=None,
        target_dir=str(tmp_path),
        draft_dir=None,
        gpu_memory_mib=H200_MIB,
    )
    assert model.facts is None
    assert (
        len(warnings) == 1 and str(tmp_path / "config.json") in warnings[0] and "hidden_size" in warnings[0]
    )
    assert not model.predict(ServerConfig(0.01, 64, 64)).skip  # nothing known yet: learning decides


def test_an_unknown_quantization_names_its_field(tmp_path: Path) -> None:
    config = (
        load_shape(TARGET)
        .path.read_text()
        .replace('"torch_dtype"', '"quantization_config": {"quant_method": "bitnet"}, "torch_dtype"')
    )
    (tmp_path / "config.json").write_text(config)
    _, warnings = build_memory_model(
        1,
        None,
        use_prior=True,
        profile=None,
        target_dir=str(tmp_path),
        draft_dir=None,
        gpu_memory_mib=H200_MIB,
    )
    assert "quantization_config.quant_method" in warnings[0] and "bitnet" in warnings[0]


def test_memory_prior_false_learns_only() -> None:
    model, warnings = build_memory_model(
        1,
        8,
        use_prior=False,
        profile=None,
        target_dir=str(TARGET),
        draft_dir=str(DRAFT),
        gpu_memory_mib=H200_MIB,
    )
    assert model.facts is None and not warnings
    assert not model.predict(ServerConfig(0.10, 64, 64, 3, 1, 4)).skip


def test_a_pool_too_small_for_its_running_requests_is_not_launched_until_a_launch_disproves_it() -> None:
    facts = facts_from_shapes(load_shape(TARGET), load_shape(DRAFT), H200_MIB, 1)
    model = PriorMemoryModel(1, 8, facts, workload=(3072, 1024))
    short = ServerConfig(0.20, 64, 256, 3, 1, 4)  # about 0.5 M tokens at most, 256 x 4096 = 1 M asked
    verdict = model.predict(short)
    assert verdict.skip and verdict.stage is FailureStage.UNDER_LOAD and not from_prior(verdict)
    assert not model.predict(replace(short, max_running_requests=16)).skip
    # A launch that served on a pool the rule calls short turns the rule off (learning decides).
    served = MemoryAccount(kv_cache_tokens=100_000)
    model.observe(
        1, TrialResult(replace(short, max_running_requests=64), TrialStatus.OK, "node", (), memory=served)
    )
    assert not model.predict(short).skip


def test_the_nodes_gpu_memory_replaces_a_drivers_other_gpu() -> None:
    model, _ = build_memory_model(
        1,
        8,
        use_prior=True,
        profile=None,
        target_dir=str(TARGET),
        draft_dir=str(DRAFT),
        gpu_memory_mib=24576.0,
    )
    assert model.predict(ServerConfig(0.70, 64, 64, 3, 1, 4)).skip  # 17 GB of weights on a 24 GB card
    gpu = (GpuSample(0, H200_MIB, 615.0),)
    model.observe(0, TrialResult(ServerConfig(0.85, 64, 64), TrialStatus.OK, "node", (), gpu_before=gpu))
    assert model.facts is not None and model.facts.gpu_total_mib == H200_MIB
    assert not model.predict(ServerConfig(0.70, 64, 64, 3, 1, 4)).skip


def test_a_launch_whose_allocator_gave_memory_back_does_not_shrink_the_graph_costs() -> None:
    """The H200's first 8B launch (llama8b-live trial 0) had more free after its captures than after its
    pools (21.35 against 21.16 GB: the allocator's cache went back first). Its figures measure no graph
    memory; read as a ratio they made every graph cost negative, and the configuration whose real log ran
    out of memory capturing the draft's graphs (llama8b-h200/f98b256s4k2d8.log) was predicted to fit."""
    import json

    from pydantic import TypeAdapter

    from orchestrator.engines.sglang.logparse import parse_log
    from orchestrator.records import TrialRecord

    fixtures = ROOT / "tests/fixtures/sglang/0.5.17"
    first = TypeAdapter(TrialRecord).validate_python(
        json.loads((fixtures / "llama8b-live/records/0000.json").read_text())
    )
    report = parse_log((fixtures / "llama8b-h200/f98b256s4k2d8.log").read_text())
    assert report.failure is not None and report.failure.stage is FailureStage.DRAFT_GRAPH_CAPTURE
    assert report.args is not None
    failed = ServerConfig(0.98, 256, report.args.max_running_requests or 256, 4, 2, 8)
    model, _ = build_memory_model(
        1,
        8,
        use_prior=True,
        profile=None,
        target_dir=str(TARGET),
        draft_dir=str(DRAFT),
        gpu_memory_mib=H200_MIB,
    )
    model.observe(0, first.result)
    assert model.graph_scale is None or model.graph_scale > 0
    prediction = model.predict(failed)
    assert prediction.skip and prediction.stage is FailureStage.DRAFT_GRAPH_CAPTURE
