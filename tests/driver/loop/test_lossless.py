"""The lossless check: speculative trials' greedy outputs against the baseline's, token by token."""

from __future__ import annotations

import asyncio
import sys
from dataclasses import replace
from pathlib import Path

import aiohttp
import pytest
import yaml
from mlflow.tracking import MlflowClient

from orchestrator.bench.greedy import GreedyAnswers, check_requests, compare, greedy_answers, greedy_outputs
from orchestrator.bench.workload import RequestSpec
from orchestrator.driver.loop.lossless import LosslessCheck
from orchestrator.driver.store.tracking import Tracker
from orchestrator.engines.sglang.wire import SGLANG_API
from orchestrator.records import TrialRecord, TrialResult, TrialStatus
from orchestrator.spec.search import make_config
from orchestrator.spec.sweep_spec import SweepSpec, parse_spec

sys.path.insert(0, str(Path(__file__).parents[2] / "sim"))
from test_sim_process import TINY_RUN, Sim, sims  # noqa: F401  (the fixture)

REPO = Path(__file__).resolve().parents[3]


def demo_spec(**budget: object) -> SweepSpec:
    data = yaml.safe_load((REPO / "trials" / "demo-chat.yaml").read_text())
    data["budget"].update(budget)
    return parse_spec(data)


def test_compare_names_the_prompt_the_position_and_both_tokens() -> None:
    requests = [RequestSpec((1, 2, 3), 4, "chat"), RequestSpec((4, 5), 4, "chat"), RequestSpec((6,), 4, "x")]
    baseline = [(10, 11, 12, 13), (20, 21, 22, 23), (30, 31)]
    trial = [(10, 11, 12, 13), (20, 21, 99, 23), (30, 31, 32)]
    found = compare(requests, baseline, trial)
    assert [(m.prompt, m.position, m.expected, m.got) for m in found] == [(1, 2, 22, 99), (2, 2, None, 32)]
    assert (
        "prompt 1 (chat, 2 ids ending [..., 4, 5]): first difference at output position 2"
        in found[0].describe()
    )
    assert "baseline token 22, speculative token 99" in found[0].describe()


def test_the_check_uses_a_few_fixed_prompts_of_the_workload() -> None:
    spec = demo_spec(baseline=True)
    requests = check_requests(spec)
    assert len(requests) == 4 and requests == check_requests(spec)
    assert all(r.dataset == "generated-chat" and r.max_new_tokens <= 32 for r in requests)


def _record(number: int, outputs: tuple[tuple[int, ...], ...], *, baseline: bool = False) -> TrialRecord:
    config = make_config(0.88, 128, 48) if baseline else make_config(0.88, 128, 48, 3, 1, None)
    result = TrialResult(config, TrialStatus.OK, "n", (), greedy_outputs=outputs)
    return TrialRecord(number, result, 1.0, baseline=baseline)


def test_mismatch_is_tagged_now_or_when_the_baseline_arrives(tmp_path: Path) -> None:
    spec = demo_spec(baseline=True)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = Tracker(uri, "lossless", tmp_path / "spool")
    tracker.start("sweep", {}, {})
    check = LosslessCheck(spec, tracker)
    good = ((1, 2, 3), (4, 5, 6), (7, 8), (9,))
    lossy = ((1, 2, 3), (4, 7, 6), (7, 8), (9,))

    early = _record(1, lossy)  # finished before the baseline: judged later
    assert check.review(early) is early
    tracker.log_trial(early)
    base = _record(0, good, baseline=True)
    assert check.review(base) is base
    tracker.log_trial(base)
    late_tags = MlflowClient(uri).get_run(tracker.run_id_of(1) or "").data.tags
    assert (
        late_tags["lossless"] == "mismatch"
        and "position 1: baseline token 5, speculative token 7" in (late_tags["lossless_detail"])
    )

    same = check.review(_record(2, good))
    assert dict(same.extra_tags)["lossless"] == "ok"
    differs = check.review(_record(3, lossy))
    assert dict(differs.extra_tags)["lossless"] == "mismatch"
    tracker.log_trial(differs)
    assert MlflowClient(uri).get_run(tracker.run_id_of(3) or "").data.tags["lossless"] == "mismatch"


def test_check_is_off_without_a_baseline(tmp_path: Path) -> None:
    tracker = Tracker(f"sqlite:///{tmp_path / 'm.db'}", "off", tmp_path / "spool")
    check = LosslessCheck(demo_spec(baseline=False), tracker)
    record = _record(1, ((1,),))
    assert check.review(record) is record


@pytest.mark.parametrize("lossy_rate", [0.0, 0.3])
def test_simulated_node_is_lossless_unless_told_otherwise(
    sims: list[Sim],  # noqa: F811
    tmp_path: Path,
    lossy_rate: float,
) -> None:
    profile = {"base": "h200-tiny", "accept_p0": 0.8, "lossy_rate": lossy_rate}
    requests = check_requests(demo_spec(baseline=True))

    def outputs(*flags: str) -> tuple[tuple[int, ...], ...]:
        folder = tmp_path / f"sim{len(sims)}"
        folder.mkdir()
        sim = Sim(folder, *flags, profile=profile)
        sims.append(sim)
        sim.wait_for("The server is fired up")

        async def run() -> tuple[tuple[int, ...], ...]:
            async with aiohttp.ClientSession() as session:
                return await greedy_outputs(sim.url(""), session, requests, api=SGLANG_API)

        return asyncio.run(run())

    plain = outputs("--skip-tokenizer-init", "--cuda-graph-max-bs", "16", "--max-running-requests", "16")
    speculative = outputs(*TINY_RUN)
    found = compare(requests, plain, speculative)
    if lossy_rate == 0.0:
        assert plain == speculative and not found
    else:
        assert found and all(m.expected != m.got for m in found)


def test_a_spec_can_make_the_simulated_node_lossy() -> None:
    from orchestrator.cli import resolve_profile

    data = yaml.safe_load((REPO / "trials" / "demo-chat.yaml").read_text())
    data["simulated"]["profile"] = {"base": "kimi-k25-rtxpro6000", "lossy_rate": 0.05}
    profile = resolve_profile(parse_spec(data))
    assert profile is not None and profile["lossy_rate"] == 0.05 and profile["gpu_count"] == 8


def test_lossy_trials_are_remembered_so_none_is_recommended(tmp_path: Path) -> None:
    tracker = Tracker(f"sqlite:///{tmp_path / 'm.db'}", "lossy", tmp_path / "spool")
    tracker.start("sweep", {}, {})
    check = LosslessCheck(demo_spec(baseline=True), tracker)
    check.review(_record(0, ((1, 2),) * 4, baseline=True))
    check.review(_record(1, ((1, 3),) * 4))
    check.review(_record(2, ((1, 2),) * 4))
    assert check.lossy == {1}


def test_a_resumed_sweep_judges_new_trials_against_the_earlier_baseline(tmp_path: Path) -> None:
    # Seen on the H200: after --resume the baseline's outputs were gone, so no later trial was judged.
    spec = demo_spec(baseline=True)
    tracker = Tracker(f"sqlite:///{tmp_path / 'm.db'}", "resume", tmp_path / "spool")
    tracker.start("sweep", {}, {})
    good = ((1, 2, 3), (4, 5, 6), (7, 8), (9,))
    lossy = ((1, 2, 3), (4, 7, 6), (7, 8), (9,))
    # The journal's records: the baseline, a trial judged only in MLflow (it finished before the
    # baseline, so its record carries no verdict), and one whose record says it was lossy.
    journal = [
        _record(0, good, baseline=True),
        _record(2, lossy),
        replace(_record(3, lossy), extra_tags=(("lossless", "mismatch"),)),
    ]
    resumed = LosslessCheck(spec, tracker)
    resumed.restore(journal)
    assert resumed.lossy == {2, 3}
    assert dict(resumed.review(_record(4, good)).extra_tags)["lossless"] == "ok"
    assert dict(resumed.review(_record(5, lossy)).extra_tags)["lossless"] == "mismatch"


@pytest.mark.parametrize(("flips", "lossy_rate"), [(True, 0.0), (True, 0.3)], ids=["near-ties", "lossy"])
def test_simulated_near_ties_are_numerics_and_a_lossy_draft_is_still_caught(
    sims: list[Sim],  # noqa: F811
    tmp_path: Path,
    flips: bool,
    lossy_rate: float,
) -> None:
    profile = {"base": "h200-tiny", "accept_p0": 0.8, "near_tie_flips": flips, "lossy_rate": lossy_rate}
    spec = demo_spec(baseline=True)
    requests = check_requests(spec)

    def answers(*flags: str, scored: bool = False) -> GreedyAnswers:
        folder = tmp_path / f"sim{len(sims)}"
        folder.mkdir()
        sim = Sim(folder, *flags, profile=profile)
        sims.append(sim)
        sim.wait_for("The server is fired up")

        async def run() -> GreedyAnswers:
            async with aiohttp.ClientSession() as session:
                return await greedy_answers(sim.url(""), session, requests, api=SGLANG_API, scored=scored)

        return asyncio.run(run())

    # as a trial asks: the server without speculation scores its answers, a speculative one does not
    plain = answers(
        "--skip-tokenizer-init", "--cuda-graph-max-bs", "16", "--max-running-requests", "16", scored=True
    )
    speculative = answers(*TINY_RUN)
    assert speculative.margins == ((),) * len(requests)
    assert all(len(m) == len(o) for m, o in zip(plain.margins, plain.outputs, strict=True))
    found = compare(requests, plain.outputs, speculative.outputs, plain.margins)
    assert found  # 32 tokens a prompt, a near tie one position in eight: every prompt flips
    tracker = Tracker(f"sqlite:///{tmp_path / 'm.db'}", "sim", tmp_path / "spool")
    tracker.start("sweep", {}, {})
    check = LosslessCheck(spec, tracker)
    base, trial = _record(0, plain.outputs, baseline=True), _record(1, speculative.outputs)
    check.review(replace(base, result=replace(base.result, greedy_margins=plain.margins)))
    verdict = dict(check.review(trial).extra_tags)["lossless"]
    if lossy_rate == 0.0:
        assert all(m.near_tie for m in found) and verdict == "near_tie" and check.lossy == set()
    else:
        assert verdict == "mismatch" and check.lossy == {1}
