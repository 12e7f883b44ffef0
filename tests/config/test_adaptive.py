"""The runtime speculation policy: flags per version, tiers, the simulated node's controller, the
memory model's extra graphs and the per-concurrency report."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from orchestrator.config.adaptive import AdaptiveMode, bucket_key, proposed_config, tiers_of, write_config
from orchestrator.driver.answer.runtime_policy import best_by_concurrency, runtime_policy
from orchestrator.driver.memory.learned import graph_width
from orchestrator.engines.engine import LaunchSettings, TrialLaunch
from orchestrator.engines.sglang.command import render_flags
from orchestrator.engines.sglang.logparse import parse_log
from orchestrator.records import StageMetrics, TrialRecord, TrialResult, TrialStatus
from orchestrator.sim.args import ArgsError
from orchestrator.sim.tiers import TierController
from orchestrator.spec.search import SpecError, make_config
from orchestrator.spec.sweep_spec import load_spec

sys.path.insert(0, str(Path(__file__).parents[1] / "sim"))
from simhelp import plan, resolve, spec

DEMO = Path(__file__).resolve().parents[2] / "trials" / "demo.yaml"


def test_adaptive_launches_at_its_largest_tier_with_top_k_1_only() -> None:
    default = make_config(0.88, 128, 48, 3, 1, None, AdaptiveMode.DEFAULT)
    assert (default.speculative_num_steps, default.speculative_num_draft_tokens) == (7, 8)  # SGLang's [1,3,7]
    tiers = make_config(0.88, 128, 48, 5, 1, None, AdaptiveMode.TIERS)
    assert tiers.speculative_num_steps == 5 and tiers.speculative_adaptive == "tiers"
    assert tiers_of(tiers) == proposed_config(5)
    with pytest.raises(SpecError, match=r"speculative_adaptive: .*topk 1 only"):
        make_config(0.88, 128, 48, 3, 2, 6, AdaptiveMode.TIERS)


def test_proposed_tiers_fall_as_the_batch_grows() -> None:
    config = proposed_config(5)
    tops = [max(config[key]["candidate_steps"]) for key in ("1", "8", "32", "64")]
    assert tops == sorted(tops, reverse=True) and tops[0] == 5 and tops[-1] == 0
    assert [bucket_key(config, b) for b in (1, 7, 8, 31, 200)] == ["1", "1", "8", "8", "64"]


def test_flags_only_for_versions_that_have_them(tmp_path: Path) -> None:
    spec_ = load_spec(DEMO)
    tiers = make_config(0.88, 128, 48, 4, 1, None, AdaptiveMode.TIERS)
    path = write_config(tiers, tmp_path)
    new = render_flags(
        TrialLaunch(
            LaunchSettings.from_spec(spec_),
            tiers,
            version="0.5.17",
            port=1,
            tp_size=8,
            adaptive_config_path=path,
        )
    )
    assert new[new.index("--speculative-adaptive") + 1] == "--speculative-adaptive-config"
    assert new[new.index("--speculative-adaptive-config") + 1] == path
    assert json.loads(Path(path).read_text()) == proposed_config(4)
    old = render_flags(
        TrialLaunch(
            LaunchSettings.from_spec(spec_),
            tiers,
            version="0.5.9",
            port=1,
            tp_size=8,
            adaptive_config_path=path,
        )
    )
    assert not any(f.startswith("--speculative-adaptive") for f in old)
    default = make_config(0.88, 128, 48, 4, 1, None, AdaptiveMode.DEFAULT)
    flags = render_flags(
        TrialLaunch(LaunchSettings.from_spec(spec_), default, version="0.5.17", port=1, tp_size=8)
    )
    assert "--speculative-adaptive" in flags and "--speculative-adaptive-config" not in flags


def test_every_extra_tier_costs_graph_memory_in_the_model_and_on_the_node(tmp_path: Path) -> None:
    fixed = make_config(0.88, 128, 48, 5, 1, None)
    tiers = make_config(0.88, 128, 48, 5, 1, None, AdaptiveMode.TIERS)
    assert graph_width(tiers) > graph_width(fixed)
    cfg = tmp_path / "tiers.json"
    cfg.write_text(json.dumps(proposed_config(5)))
    flags = ("--cuda-graph-max-bs", "16", "--max-running-requests", "16")
    _, plain = plan("h200-tiny", *spec(5, 1, 6), *flags)
    _, adaptive = plan(
        "h200-tiny",
        *spec(5, 1, 6),
        *flags,
        "--speculative-adaptive",
        "--speculative-adaptive-config",
        str(cfg),
    )
    assert plain.failure is None and adaptive.failure is None
    assert adaptive.final_avail < plain.final_avail
    built = [s.name for s in adaptive.steps if s.name.startswith("adaptive")]
    assert built == ["adaptive steps=0", "adaptive steps=1", "adaptive steps=3"]  # not the launch's 5


def test_node_refuses_what_sglang_refuses(tmp_path: Path) -> None:
    with pytest.raises(ArgsError, match="only topk=1 is supported"):
        resolve("h200-tiny", *spec(3, 2, 6), "--speculative-adaptive")
    old = {"base": "h200-tiny", "sglang_version": "0.5.9", "version_behaviour": "<=0.5.9"}
    with pytest.raises(ArgsError, match="unrecognized arguments: --speculative-adaptive"):
        resolve(old, *spec(3, 1, 4), "--speculative-adaptive")
    bad = tmp_path / "bad.json"
    bad.write_text('{"1": {"candidate_steps": [1, -2]}}')
    with pytest.raises(ArgsError, match="candidate_steps must be a list of non-negative ints"):
        resolve(
            "h200-tiny", *spec(3, 1, 4), "--speculative-adaptive", "--speculative-adaptive-config", str(bad)
        )


def test_controller_climbs_on_good_drafts_and_falls_on_bad_ones_per_bucket() -> None:
    tiers = TierController(proposed_config(5), launch_steps=5)
    assert tiers.steps_for(1) == 5 and tiers.steps_for(8) == 1  # 5 is not a tier there: the middle one
    for _ in range(60):
        tiers.observe(1, [0])  # nothing accepted in the light bucket
        tiers.observe(8, [3, 3])  # everything accepted in the heavier one
    assert tiers.steps_for(1) == 1 and tiers.steps_for(8) == 3
    for _ in range(60):
        tiers.observe(1, [5])
    assert tiers.steps_for(1) == 5


def test_log_parser_counts_the_adaptive_states_as_draft_graphs() -> None:
    log = "\n".join(
        [
            "[2026-11-30 10:00:00 TP0] Capture draft extend CUDA graph end. elapsed=1.00 s, "
            "mem usage=0.50 GB, avail mem=10.00 GB.",
            "[2026-11-30 10:00:01 TP0] Built adaptive runtime state steps=0: elapsed=1.76s, mem=0.10GB",
            "[2026-11-30 10:00:02 TP0] Built adaptive runtime state steps=1: elapsed=1.80s, mem=0.11GB",
        ]
    )
    memory = parse_log(log).memory.as_metrics()
    assert memory["draft_graph_gb"] == pytest.approx(0.71)


def _record(number: int, steps: int | None, by_level: dict[int, float]) -> TrialRecord:
    config = make_config(0.88, 128, 48, steps, 1 if steps else None, None)
    stages = tuple(
        StageMetrics(
            concurrency=c,
            num_requests=10,
            completed=10,
            failed=0,
            duration_s=1.0,
            output_tok_per_s=tok,
            request_per_s=1.0,
            ttft_p50_ms=1,
            ttft_p99_ms=1,
            itl_p50_ms=1,
            itl_p99_ms=1,
            tpot_p50_ms=1,
            accept_length=2.0 if steps else None,
        )
        for c, tok in by_level.items()
    )
    result = TrialResult(config, TrialStatus.OK, "n", (), stages=stages)
    return TrialRecord(number, result, max(by_level.values()))


def test_best_setting_per_concurrency_and_the_policy_to_launch_with() -> None:
    records = [
        _record(0, None, {1: 50.0, 64: 900.0}),
        _record(1, 5, {1: 120.0, 64: 700.0}),
        _record(2, 2, {1: 100.0, 64: 850.0}),
    ]
    levels = best_by_concurrency(records)
    assert [(lv["concurrency"], lv["trial"], lv["speculative_num_steps"]) for lv in levels] == [
        (1, 1, 5),
        (64, 0, 0),
    ]
    policy = runtime_policy(records[0], levels)
    assert policy["speculative_adaptive"] == "off"
    suggested = policy["suggested_adaptive_config"]
    assert suggested["1"]["candidate_steps"] == [5] and suggested["64"]["candidate_steps"] == [0, 5]
    adaptive = TrialRecord(
        3,
        TrialResult(make_config(0.88, 128, 48, 5, 1, None, AdaptiveMode.TIERS), TrialStatus.OK, "n", ()),
        1.0,
    )
    assert runtime_policy(adaptive, levels)["candidate_steps_by_batch"] == proposed_config(5)


def test_demo_chat_searches_the_policy_and_yaml_off_means_off() -> None:
    chat = load_spec(DEMO.with_name("demo-chat.yaml"))
    assert chat.search.speculative_adaptive == [AdaptiveMode.OFF, AdaptiveMode.DEFAULT, AdaptiveMode.TIERS]
    assert load_spec(DEMO).search.speculative_adaptive == [AdaptiveMode.OFF]  # the default: off


def test_trial_on_a_version_without_it_fails_before_launching(tmp_path: Path) -> None:
    from orchestrator.node.backends import SimulatedNode
    from orchestrator.node.trial import TrialRun
    from orchestrator.sim.profile import load_profile
    from orchestrator.trial_events import TrialRequest

    spec_ = load_spec(DEMO)
    profile = load_profile("kimi-k25-rtxpro6000").model_copy(update={"sglang_version": "0.5.9"})
    config = make_config(0.88, 128, 48, 3, 1, None, AdaptiveMode.DEFAULT)
    request = TrialRequest(spec_, config, 0, str(tmp_path / "t"))
    node = SimulatedNode(spec_, f"adaptive-old-{tmp_path.name}", profile.model_dump(mode="json"))
    result = TrialRun(request, node, None).run()
    assert result.status is TrialStatus.FAILED and result.command == ()
    assert result.failure is not None and "has no --speculative-adaptive" in result.failure.message


def test_each_level_s_best_is_a_configuration_s_median_not_its_luckiest_launch() -> None:
    """The demo's run: s1 launched three times at concurrency 16 (1051.0, 1109.0, 1032.5 tok/s) and s2
    three times (1069.2, 1067.3, 1090.4). s1's best launch is the fastest stage of all, its median is not:
    the level's best is s2 at its median, from the launch that measured it, over 3 launches."""
    s1 = [_record(n, 1, {16: tok}) for n, tok in ((7, 1051.0), (11, 1109.0), (12, 1032.5))]
    s2 = [_record(n, 2, {16: tok}) for n, tok in ((6, 1069.2), (9, 1067.3), (10, 1090.4))]
    (level,) = best_by_concurrency(s1 + s2)
    assert level["speculative_num_steps"] == 2
    assert level["output_tok_per_s"] == 1069.2 and level["trial"] == 6 and level["launches"] == 3
