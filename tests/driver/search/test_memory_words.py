"""The memory account and the OOM diagnoses add up: each figure a sentence or a row derives is computed
from the figures it names, on the simulated node's own records (the demo's Kimi-K2.5 on 8x RTX PRO 6000).

Seen in the demo report: "the target's weights take 68.02 GiB of 94.04 GiB per GPU, the draft's 2.24 GiB,
leaving 26.02 GiB" (94.04 - 68.02 - 2.24 is 23.78: the draft loads later); the best trial's account went
from 7.60 GiB free after the KV pools through 1.06 + 1.44 GiB of graphs to 0.92 GiB free at the end, with
4.18 GiB in no row; and "the KV pool leaves 10.42 GiB for graphs, about 10.68 GiB are needed" while no
graph row was above 2.5 GiB.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from orchestrator.cli import resolve_profile
from orchestrator.driver.memory.learned import GRAPH_SAFETY_GB, MemoryModel
from orchestrator.driver.search.diagnosis import diagnose
from orchestrator.records import FailureStage, TrialResult, TrialStatus
from orchestrator.report.memory_rows import account_rows
from orchestrator.spec.search import make_config
from orchestrator.spec.sweep_spec import load_spec

ROOT = Path(__file__).resolve().parents[3]
NUM = r"([0-9]+\.[0-9]+) GiB"


@pytest.fixture(scope="module")
def launches(tmp_path_factory: pytest.TempPathFactory) -> tuple[TrialResult, TrialResult]:
    """The demo's best trial (served) and its trial 3 (the draft's graphs ran out of memory)."""
    from orchestrator.node.backends import SimulatedNode
    from orchestrator.node.trial import TrialRun
    from orchestrator.trial_events import TrialRequest

    tmp = tmp_path_factory.mktemp("words")
    spec = load_spec(ROOT / "trials" / "demo.yaml")
    spec = spec.model_copy(update={"timeouts": spec.timeouts.model_copy(update={"gpu_clean_s": 3.0})})
    profile = resolve_profile(spec)
    node = SimulatedNode(spec, f"words-{tmp.name}", profile or {})
    configs = (make_config(0.91, 64, 16, 2, 2, 3), make_config(0.88, 64, 16, 5, 4, 12))
    served, oom = (
        TrialRun(TrialRequest(spec, c, i, str(tmp / f"t{i}"), profile), node, None).run()
        for i, c in enumerate(configs)
    )
    assert served.status is TrialStatus.OK
    assert oom.status is TrialStatus.OOM and oom.failure is not None
    assert oom.failure.stage is FailureStage.DRAFT_GRAPH_CAPTURE
    return served, oom


def test_what_the_weights_leave_is_what_the_named_weights_leave(
    launches: tuple[TrialResult, TrialResult],
) -> None:
    _, oom = launches
    text = diagnose(oom, MemoryModel())
    said = re.search(rf"weights take {NUM}(?: and the draft's {NUM})? of {NUM} per GPU, leaving {NUM}", text)
    assert said is not None, text
    target, draft, total, left = (float(g) if g else 0.0 for g in said.groups())
    assert total - target - draft == pytest.approx(left, abs=0.015), text
    m = oom.memory
    assert left == pytest.approx(m.avail_after_weights_gb or 0.0)
    if not draft:  # the draft's weights are still named, as loaded later
        assert f"the draft's {m.draft_weights_gb:.2f} GiB" in text and "later" in text


def test_a_graph_oom_names_what_the_room_after_the_kv_pools_is_for(
    launches: tuple[TrialResult, TrialResult],
) -> None:
    served, oom = launches
    model = MemoryModel()
    model.observe(0, served)
    model.observe(1, oom)
    text = diagnose(oom, model)
    room = oom.memory.avail_after_kv_gb
    assert room is not None
    assert f"{room:.2f} GiB were free after the KV pool" in text, text
    assert "the CUDA graphs and the rest of start-up" in text
    assert "leaves 10.42 GiB for graphs" not in text
    # The need the model now counts is this launch's room plus its steps, and says so.
    said = re.search(
        rf"ran out with {NUM} free there: .* asks for {NUM} \({NUM}, above that, and its {NUM} margin\)",
        text,
    )
    assert said is not None, text
    floor, asked, above, margin = (float(g) for g in said.groups())
    assert floor == pytest.approx(room) and margin == pytest.approx(GRAPH_SAFETY_GB)
    assert above == pytest.approx(floor + 0.01, abs=0.006)
    assert asked == pytest.approx(above + margin, abs=0.006)


def test_the_memory_account_of_a_served_trial_adds_up_row_by_row(
    launches: tuple[TrialResult, TrialResult],
) -> None:
    served, _ = launches
    rows = {key: (value, note) for key, value, note in account_rows(served.memory.as_metrics())}
    v = {k: value for k, (value, _) in rows.items()}
    late = v["avail_at_start_gb"] - v["weights_gb"] == pytest.approx(v["avail_after_weights_gb"], abs=0.015)
    assert late, "the demo's draft loads after the target's graphs (SGLang <= 0.5.9 order)"
    assert "target's weights" in rows["avail_after_weights_gb"][1]
    assert "after the target's" in rows["draft_weights_gb"][1]
    # From free after the weights to free after the KV pools: the target's pool and what else the step took.
    assert v["avail_after_weights_gb"] - v["kv_cache_gb"] - v["kv_pool_rest_gb"] == pytest.approx(
        v["avail_after_kv_gb"], abs=0.015
    )
    # From free after the KV pools to free at the end: every row that start-up took after them.
    after = v["graph_gb"] + v["draft_graph_gb"] + v["draft_weights_gb"] + v["draft_kv_cache_gb"]
    assert v["avail_after_kv_gb"] - after - v["startup_rest_gb"] == pytest.approx(
        v["avail_end_gb"], abs=0.015
    )
    assert "derived" in rows["startup_rest_gb"][1] and "derived" in rows["kv_pool_rest_gb"][1]


def test_a_prediction_from_a_failed_launch_names_the_rest_of_start_up_too(
    launches: tuple[TrialResult, TrialResult],
) -> None:
    served, oom = launches
    model = MemoryModel()
    model.observe(0, served)
    model.observe(1, oom)
    prediction = model.predict(oom.config)
    assert not prediction.fits
    room = oom.memory.avail_after_kv_gb
    assert f"ran out of memory with {room:.2f} GiB free after the KV pools" in prediction.reason
    assert "the CUDA graphs and the rest of start-up" in prediction.reason


def test_the_graph_floor_is_counted_in_gib_every_term_named() -> None:
    """Seen: "asks for 10.68 GiB (10.42 GiB + 0.01 + its 0.25 GiB margin)": a sum with a term unitless.
    What it asks is just above what ran out, then the margin, each in GiB."""
    from orchestrator.driver.memory.learned import MemoryModel
    from orchestrator.driver.search.diagnosis import need_words
    from orchestrator.records import ServerConfig

    model = MemoryModel()
    model.graph_floor.append((64.0, 10.42))
    words = need_words(model, ServerConfig(0.88, 64, 16, 3, 1, 4))
    assert "ran out with 10.42 GiB free there" in words
    assert "asks for 10.68 GiB (10.43 GiB, above that, and its 0.25 GiB margin)." in words
