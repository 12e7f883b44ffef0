"""The serving-memory bound, learned from the H200 sweep (tests/fixtures/sglang/0.5.17/llama8b-live).

Trial 2 (s4k2d8, fraction 0.98, graph bs 32, max running 64) started with 3.3 GB left and ran out of memory
under load at concurrency 32; s1k2d2 served at the same fraction. Once the node records it as what it was
(an OOM under load), the sweep's memory model must not launch what needs as much with no more room, and
must still launch what needs less, or has more room.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from pydantic import TypeAdapter

from orchestrator.driver.loop.node_memory import memory_model_for
from orchestrator.driver.memory.learned import MemoryModel
from orchestrator.records import Failure, FailureKind, FailureStage, TrialRecord, TrialStatus
from orchestrator.spec.search import make_config
from orchestrator.spec.sweep_spec import load_spec

ROOT = Path(__file__).resolve().parents[3]
LIVE = ROOT / "tests" / "fixtures" / "sglang" / "0.5.17" / "llama8b-live"
SPEC = ROOT / "trials" / "h200-8b.yaml"
_RECORD = TypeAdapter(TrialRecord)


def _learned() -> MemoryModel:
    model, _ = memory_model_for(load_spec(SPEC), None)
    for path in sorted((LIVE / "records").glob("*.json"))[:3]:
        record = _RECORD.validate_python(json.loads(path.read_text()))
        result = record.result
        if record.number == 2:  # what the node records now (it was recorded as ok)
            oom = Failure(
                FailureStage.UNDER_LOAD, FailureKind.OOM, "torch.OutOfMemoryError: CUDA out of memory"
            )
            result = replace(result, status=TrialStatus.OOM_UNDER_LOAD, failure=oom)
        model.observe(record.number, result)
    return model


def test_the_failed_configuration_and_heavier_ones_with_no_more_room_are_not_launched_again() -> None:
    model = _learned()
    for config in (
        make_config(0.98, 32, 64, 4, 2, 8),  # trial 2 itself
        make_config(0.98, 32, 64, 3, 2, 8),  # as many tokens a verify
        make_config(0.98, 64, 64, 4, 2, 8),  # larger graphs: less left for as many tokens
    ):
        prediction = model.predict(config)
        assert prediction.skip, config.label()
        assert prediction.stage is FailureStage.UNDER_LOAD
        assert "trial 2 ran out of memory under load" in prediction.reason
        # GiB, as SGLang's log figures are and as `specsweep fit` labels them
        assert "GiB left after start-up" in prediction.reason and " GB" not in prediction.reason


@pytest.mark.parametrize(
    "config",
    [
        make_config(0.98, 32, 64, 1, 2, 2),  # what served at this fraction: 128 tokens a verify
        make_config(0.98, 32, 64, 1, 1, 2),
        make_config(0.90, 32, 64, 4, 2, 8),  # the same tree with 8 % of the GPU more left
    ],
)
def test_lighter_or_roomier_configurations_are_still_launched(config: object) -> None:
    assert not _learned().predict(config).skip  # type: ignore[arg-type]


TRITON = (
    ROOT / "tests" / "fixtures" / "sglang" / "0.5.17" / "llama8b-h200" / "f98b32s4k2d8-triton-oom-under-load"
)


def _triton_oom_as_the_node_records_it() -> TrialRecord:
    """The same configuration launched again on the H200 (the spec of trials/h200-8b.yaml with it as its
    known-good configuration): it served, then ran out of memory in a Triton kernel at concurrency 32.
    That run recorded it as failed; the node classifies it from its log now."""
    from orchestrator.engines.sglang.logparse import LogParser
    from orchestrator.node.trial_load import under_load_failure

    record = _RECORD.validate_python(json.loads(TRITON.with_suffix(".record.json").read_text()))
    parser = LogParser()
    for line in TRITON.with_suffix(".log").read_text().splitlines():
        parser.feed(line)
    status, failure = under_load_failure(parser.report(), server_exited=False, why="")
    return replace(record, result=replace(record.result, status=status, failure=failure))


def test_a_launch_out_of_memory_under_load_still_teaches_its_start_up() -> None:
    """Its start-up completed, so its memory account (KV pool, graphs, what was left) is as good as a
    served launch's: the next tree is launched at the highest fraction that fits, not a guess between
    the fractions nobody ruled out (the H200 run launched s3k1d4 at 0.56 next)."""
    from orchestrator.config.draft_tree import DraftTree
    from orchestrator.driver.proposal.structure import choose_structure, fitting_config

    spec = load_spec(SPEC)
    record = _triton_oom_as_the_node_records_it()
    assert record.result.status is TrialStatus.OOM_UNDER_LOAD
    model, _ = memory_model_for(spec, None)
    model.observe(record.number, record.result)
    lighter = model.predict(make_config(0.98, 32, 64, 3, 1, 4))
    assert lighter.confident and lighter.fits
    assert model.predict(record.result.config).skip  # and the failed one is learned
    structure = choose_structure(spec.search, spec.workload.concurrency)
    config = fitting_config(structure, DraftTree(3, 1, 4), model)
    assert config is not None and config.mem_fraction_static == pytest.approx(0.98)
