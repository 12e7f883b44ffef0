"""The toy engine in the engines' contract: its own server, launched live, and its own failures."""

from __future__ import annotations

from orchestrator.records import FailureKind, FailureStage
from orchestrator.spec.search import make_config
from tests.engines.contract import EngineCase, FailureCase, failed_launch
from tests.engines.toy.toy_engine import READY_LINE, TOY
from tests.engines.toy.toy_spec import ToyNode, toy_spec

CONFIG = make_config(0.8, 64, 16, 2, 1, 3)


def failure(how: str, stage: FailureStage, kind: FailureKind) -> FailureCase:
    spec = toy_spec("--toy-fail", how)
    return FailureCase(how, stage, kind, lambda folder: failed_launch(ToyNode(spec, "toy"), CONFIG, folder))


def contract_case() -> EngineCase:
    spec = toy_spec()
    return EngineCase(
        name="toy",
        engine=TOY,
        spec=spec,
        config=CONFIG,
        version="1.2",
        module="toy_server",
        ready_marker=READY_LINE,
        failures=(
            failure("kv-oom", FailureStage.KV_ALLOCATION, FailureKind.OOM),
            failure("crash", FailureStage.WEIGHT_LOADING, FailureKind.CRASH),
        ),
        node=lambda folder: ToyNode(spec, "toy-node"),
    )
