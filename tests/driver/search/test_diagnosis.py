"""Every diagnosis agrees with the stage its own log shows, on real logs and the simulated node's."""

from __future__ import annotations

from pathlib import Path

import pytest
from optuna.trial import TrialState

from orchestrator.cli import resolve_profile
from orchestrator.driver.console.progress import ProgressPrinter
from orchestrator.driver.loop import observers
from orchestrator.driver.loop.settle import OptunaTell, Settled
from orchestrator.driver.memory.learned import MemoryModel
from orchestrator.driver.search.diagnosis import Speculation, diagnose, speculation
from orchestrator.engines.sglang.logparse import parse_log
from orchestrator.records import FailureStage, StageMetrics, TrialResult, TrialStatus
from orchestrator.spec.search import make_config
from orchestrator.spec.sweep_spec import load_spec

ROOT = Path(__file__).resolve().parents[3]
FIX = ROOT / "tests" / "fixtures" / "sglang"

# Every start-up OOM among the fixtures (real 0.5.17 logs, and per-version logs built from the sources).
STARTUP_OOMS = [
    p
    for p in sorted(FIX.rglob("*.log"))
    if (r := parse_log(p.read_text())).failure and r.failure.is_oom and not r.ready
]


def test_there_are_startup_oom_logs_of_every_stage() -> None:
    stages = {parse_log(p.read_text()).failure.stage for p in STARTUP_OOMS}  # type: ignore[union-attr]
    assert {
        FailureStage.KV_ALLOCATION,
        FailureStage.TARGET_GRAPH_CAPTURE,
        FailureStage.DRAFT_GRAPH_CAPTURE,
    } <= stages


@pytest.mark.parametrize("path", STARTUP_OOMS, ids=lambda p: str(p.relative_to(FIX)))
def test_the_advice_matches_the_stage_in_the_log(path: Path) -> None:
    report = parse_log(path.read_text())
    assert report.failure is not None
    result = TrialResult(
        config=make_config(0.9, 64, 48, 3, 1, 4),
        status=TrialStatus.OOM,
        node_id="n",
        command=(),
        failure=report.failure,
        memory=report.memory,
    )
    text = diagnose(result, MemoryModel())
    m = result.memory
    if report.failure.stage is FailureStage.KV_ALLOCATION and not m.kv_cache_tokens:
        assert "OOM while allocating the KV cache" in text and "Raise mem_fraction_static" in text
    elif report.failure.stage is FailureStage.KV_ALLOCATION:
        # The log shows the target's pool: it was not the pool that failed, and more pool cannot help.
        assert "Raise" not in text and "Lower mem_fraction_static" in text
    else:
        whose = "draft's" if report.failure.stage is FailureStage.DRAFT_GRAPH_CAPTURE else "target's"
        assert f"OOM while capturing the {whose} CUDA graphs" in text
        assert "nothing is left for the KV pool" not in text


def test_draft_oom_after_the_targets_pool_is_told_to_lower_the_fraction(tmp_path: Path) -> None:
    """The demo's own case: Kimi at 0.94 allocates its KV pool (311,320 tokens) and captures the target's
    graphs; then the draft, loaded last as in SGLang <= 0.5.9, no longer fits. It was told to *raise* the
    fraction, the opposite of the fix."""
    from orchestrator.node.backends import SimulatedNode
    from orchestrator.node.trial import TrialRun
    from orchestrator.trial_events import TrialRequest

    spec = load_spec(ROOT / "trials" / "demo.yaml")
    spec = spec.model_copy(update={"timeouts": spec.timeouts.model_copy(update={"gpu_clean_s": 3.0})})
    profile = resolve_profile(spec)
    node = SimulatedNode(spec, f"diag-{tmp_path.name}", profile or {})
    request = TrialRequest(spec, make_config(0.94, 64, 64, 1, 4, 2), 0, str(tmp_path / "t"), profile)
    result = TrialRun(request, node, None).run()
    assert result.status is TrialStatus.OOM
    assert result.memory.kv_cache_tokens
    text = diagnose(result, MemoryModel())
    assert "Raise mem_fraction_static" not in text
    assert "Lower mem_fraction_static below 0.940" in text
    assert "311,320 tokens" in text or f"{result.memory.kv_cache_tokens:,} tokens" in text


def _ok(accept: float, steps: int, topk: int, draft: int) -> TrialResult:
    stage = StageMetrics(4, 8, 8, 0, 1.0, 100.0, 8.0, 1, 2, 1, 2, 1, accept)
    return TrialResult(make_config(0.8, 64, 48, steps, topk, draft), TrialStatus.OK, "n", (), stages=(stage,))


def test_a_tree_that_accepts_nothing_is_not_a_broken_draft_when_the_draft_works_elsewhere() -> None:
    """On the H200 the same draft gave 4.00 at steps 3 top-k 1 and 1.02 at steps 1 top-k 2 draft 2."""
    poor = _ok(1.02, 1, 2, 2)
    text = diagnose(poor, MemoryModel(), best_accept_elsewhere=4.0)
    assert text.startswith("poor_tree") and "4.00" in text and "broken" not in text
    # With no trial of the draft doing well, it is the broken-draft alarm.
    assert diagnose(poor, MemoryModel()).startswith("broken_speculation")
    assert diagnose(poor, MemoryModel(), best_accept_elsewhere=1.03).startswith("broken_speculation")


def test_the_speculation_verdict_is_a_value() -> None:
    poor = _ok(1.02, 1, 2, 2)
    assert speculation(poor) is Speculation.BROKEN
    assert speculation(poor, best_accept_elsewhere=4.0) is Speculation.POOR_TREE
    assert speculation(_ok(3.5, 3, 1, 4)) is Speculation.FINE


def test_the_diagnosis_observer_counts_broken_drafts_by_the_verdict_not_by_its_words(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The observer once matched the diagnosis' first word: reworded, two broken drafts raised no alarm."""
    monkeypatch.setattr(observers, "diagnose", lambda *a, **k: "the draft never helps: acceptance 1.02")
    watch = observers.Diagnosis(MemoryModel())
    for number in range(2):
        result = _ok(1.02, 1, 2, 2)
        told = OptunaTell(TrialState.COMPLETE, 100.0, {})
        watch(observers.Finished(number, Settled(result, 100.0, None, told, {}), baseline=False))
    assert watch.broken_trials == 2 and watch.broken_warned


def test_a_broken_draft_is_told_once_per_trial_on_the_console(caplog: pytest.LogCaptureFixture) -> None:
    """On a real node the alarm came twice for a trial: the console's `!!! BROKEN SPECULATION` line and an
    `ERROR orchestrator.driver.loop.observers` log line with the same words (the CLI logs WARNING and
    above)."""
    caplog.set_level("WARNING")
    console: list[str] = []
    printer = ProgressPrinter(3, tty=False, write=console.append)
    watch = observers.Diagnosis(MemoryModel())
    for number in range(3):
        result = _ok(1.01, 2, 1, 3)
        told = OptunaTell(TrialState.COMPLETE, 100.0, {})
        done = observers.Finished(number, Settled(result, 100.0, None, told, {}), baseline=False)
        watch(done)
        observers.build_record(done)
        assert done.record is not None
        printer.record(done.record)
    said = "".join(console) + "".join(f"{r.getMessage()}\n" for r in caplog.records)
    assert said.count("acceptance length 1.01") == 3, said
    assert "".join(console).count("!!! BROKEN SPECULATION") == 3
