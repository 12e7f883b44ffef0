"""The learned memory model and the diagnoses, on figures read from real SGLang 0.5.17 logs."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from orchestrator.driver.memory.learned import MemoryModel
from orchestrator.driver.search.diagnosis import broken_speculation, check_draft_config, diagnose
from orchestrator.engines.sglang.logparse import parse_log
from orchestrator.records import Failure, FailureKind, FailureStage, StageMetrics, TrialResult, TrialStatus
from orchestrator.spec.search import make_config

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "sglang" / "0.5.17"


def result_from_log(name: str, config_args: tuple, status: TrialStatus) -> TrialResult:
    report = parse_log((FIX / name).read_text())
    return TrialResult(
        config=make_config(*config_args),
        status=status,
        node_id="n",
        command=(),
        failure=report.failure,
        memory=report.memory,
    )


def test_learns_from_one_real_start_and_predicts_the_kv_oom() -> None:
    model = MemoryModel()
    ok = result_from_log("ok.log", (0.85, 16, 16, 3, 1, 4), TrialStatus.OK)
    model.observe(0, ok)
    assert model.ready
    # The real minimum viable fraction printed by SGLang was 0.0018.
    minimum = model.kv_tokens.solve(1.0)
    assert minimum is not None and 0.0005 < minimum < 0.005
    assert model.predict(make_config(0.0001, 16, 16, 3, 1, 4)).skip
    fine = model.predict(make_config(0.80, 16, 16, 3, 1, 4))
    assert fine.fits and fine.kv_tokens is not None
    # Within 5 % of what SGLang itself would allocate at 0.80 (linear in the fraction).
    assert abs(fine.kv_tokens - 12379562 * (0.80 * 139.09 - 0.15) / (0.85 * 139.09 - 0.15)) < 0.05 * 12379562


def test_graph_oom_teaches_a_floor_and_the_diagnosis_has_figures() -> None:
    model = MemoryModel()
    model.observe(0, result_from_log("ok.log", (0.85, 16, 16, 3, 1, 4), TrialStatus.OK))
    oom = result_from_log("graph-oom.log", (0.99, 512, 512, 3, 1, 4), TrialStatus.OOM)
    assert oom.failure is not None and oom.failure.stage is FailureStage.TARGET_GRAPH_CAPTURE
    model.observe(1, oom)
    # Predicted feasible before (one graph point only), so the OOM is recorded as a correction.
    assert model.predict(make_config(0.99, 512, 512, 3, 1, 4)).skip
    text = diagnose(oom, model)
    assert "OOM while capturing the target's CUDA graphs" in text
    assert "0.990" in text and "GiB" in text
    assert " GB" not in text  # the log's "GB" figures are GiB, labelled as `specsweep fit` labels them
    assert "mem_fraction_static" in text


def test_kv_diagnosis_names_the_lever() -> None:
    model = MemoryModel()
    model.observe(0, result_from_log("ok.log", (0.85, 16, 16, 3, 1, 4), TrialStatus.OK))
    kv = result_from_log("kv-oom.log", (0.0001, 16, 16, 3, 1, 4), TrialStatus.OOM)
    text = diagnose(kv, model)
    assert text.startswith("OOM while allocating the KV cache")
    assert "Raise mem_fraction_static above 0.00" in text


def test_non_oom_capture_failure_is_not_called_oom() -> None:
    r = TrialResult(
        config=make_config(0.8, 64, 48, 3, 1, 4),
        status=TrialStatus.FAILED,
        node_id="n",
        command=(),
        failure=Failure(
            FailureStage.TARGET_GRAPH_CAPTURE, FailureKind.CRASH, "Capture cuda graph failed: bad"
        ),
    )
    assert "other than memory" in diagnose(r, MemoryModel())


def stage(accept: float | None) -> StageMetrics:
    return StageMetrics(4, 8, 8, 0, 1.0, 100.0, 8.0, 1, 2, 1, 2, 1, accept)


def test_broken_speculation_flagged_only_with_speculation_on() -> None:
    spec_on = TrialResult(make_config(0.8, 64, 48, 3, 1, 4), TrialStatus.OK, "n", (), stages=(stage(1.01),))
    assert broken_speculation(spec_on).startswith("broken_speculation")
    good = TrialResult(make_config(0.8, 64, 48, 3, 1, 4), TrialStatus.OK, "n", (), stages=(stage(2.9),))
    assert broken_speculation(good) == ""
    base = TrialResult(make_config(0.8, 64, 48), TrialStatus.OK, "n", (), stages=(stage(None),))
    assert broken_speculation(base) == ""


def test_eagle3_draft_under_eagle_is_refused(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(
        '{"architectures": ["LlamaForCausalLMEagle3"], '
        '"eagle_config": {"eagle_aux_hidden_state_layer_ids": [0]}}'
    )
    assert "EAGLE-3 draft" in check_draft_config(str(tmp_path), "EAGLE")
    assert check_draft_config(str(tmp_path), "EAGLE3") == ""


def test_a_kv_oom_alone_rules_out_every_lower_fraction() -> None:
    model = MemoryModel()
    model.observe(0, result_from_log("kv-oom.log", (0.0001, 16, 16, 3, 1, 4), TrialStatus.OOM))
    assert not model.ready  # no KV pool was ever allocated
    assert model.predict(make_config(0.0001, 64, 16, 2, 1, 3)).skip
    assert not model.predict(make_config(0.5, 16, 16, 3, 1, 4)).skip


def test_the_learned_models_figures_are_labelled_gib_as_the_memory_command_labels_them() -> None:
    """SGLang's log prints GiB as "GB"; what the sweep says about them (a predicted OOM's reason, a
    correction) says GiB, as `specsweep fit` does, so a user comparing the two reads one unit."""
    model = MemoryModel()
    ok = result_from_log("ok.log", (0.85, 16, 16, 3, 1, 4), TrialStatus.OK)
    model.observe(0, ok)
    model.observe(1, result_from_log("graph-oom.log", (0.99, 512, 512, 3, 1, 4), TrialStatus.OOM))
    reason = model.predict(make_config(0.99, 512, 512, 3, 1, 4)).reason
    # The need is this launch's own room (it ran out there): it held the graphs and the rest of start-up.
    assert "GiB would be free at fraction 0.990" in reason and "ran out of memory with" in reason
    assert " GB" not in reason
    # A launch whose room after the KV pool is far from the prediction corrects the model, in GiB.
    assert ok.memory.avail_after_kv_gb is not None
    off = replace(ok, memory=replace(ok.memory, avail_after_kv_gb=ok.memory.avail_after_kv_gb + 5.0))
    corrections = model.observe(2, off)
    room = [c.what for c in corrections if c.what.startswith("graph room")]
    assert room and "GiB, measured" in room[0] and " GB" not in room[0]
