"""The simulated node in the engines' contract: SGLang's engine (the same flags, log reader and API) over
the simulated SGLang server, launched live on the tiny H200 profile."""

from __future__ import annotations

from pathlib import Path

import yaml

from orchestrator.cli import resolve_profile
from orchestrator.engines import engine_for
from orchestrator.engines.launch import SIM_SERVER_MODULE
from orchestrator.node.backends import SimulatedNode
from orchestrator.records import FailureKind, FailureStage
from orchestrator.spec.engine_catalog import EngineName
from orchestrator.spec.search import make_config
from orchestrator.spec.sweep_spec import SweepSpec, parse_spec
from tests.engines.contract import EngineCase, FailureCase, failed_launch

ROOT = Path(__file__).resolve().parents[2]
OK = make_config(0.85, 16, 16, 3, 1, 4)


def sim_spec(*flags: str) -> SweepSpec:
    data = yaml.safe_load((ROOT / "trials" / "demo.yaml").read_text())
    data["simulated"]["profile"] = "h200-tiny"
    data["node"]["gpus"] = 1
    data["model"].update(path="/models/tiny-llama", draft_path="/models/tiny-llama-eagle3")
    data["server"]["flags"] = [*data["server"]["flags"], *flags]
    return parse_spec(data, "sim.yaml")


def node(spec: SweepSpec, folder: Path) -> SimulatedNode:
    return SimulatedNode(spec, f"contract-{folder.name}", resolve_profile(spec) or {})


def contract_case() -> EngineCase:
    spec = sim_spec()
    refused = sim_spec("--no-such-flag")  # SGLang's argument parser refuses it, and so does the simulator's
    return EngineCase(
        name="simulated",
        engine=engine_for(EngineName.SGLANG),
        spec=spec,
        config=OK,
        version="0.5.17",
        module=SIM_SERVER_MODULE,
        ready_marker="The server is fired up and ready to roll!",
        failures=(
            FailureCase(
                "kv-oom",
                FailureStage.KV_ALLOCATION,
                FailureKind.OOM,
                lambda folder: failed_launch(node(spec, folder), make_config(0.001, 16, 16, 3, 1, 4), folder),
            ),
            FailureCase(
                "unknown-flag",
                FailureStage.LAUNCH,
                FailureKind.CRASH,
                lambda folder: failed_launch(node(refused, folder), OK, folder),
            ),
        ),
        node=lambda folder: node(spec, folder),
        sim_paths={"sim_profile_path": "profile.json", "sim_state_dir": "state"},
    )
