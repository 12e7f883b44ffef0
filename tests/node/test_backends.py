"""Which node a trial gets: the spec's node kind picks real or simulated, its engine what a real one runs."""

from __future__ import annotations

from pathlib import Path

import yaml

from orchestrator.engines import engine_for
from orchestrator.node.backends import RealNode, SimulatedNode, make_node
from orchestrator.spec.engine_catalog import EngineName
from orchestrator.spec.search import make_config
from orchestrator.spec.sweep_spec import load_spec, parse_spec

DEMO = Path(__file__).resolve().parents[2] / "trials" / "demo.yaml"


def test_the_node_kind_picks_the_node_and_the_engine_what_it_launches(tmp_path: Path) -> None:
    simulated = make_node(load_spec(DEMO), "n", {"gpus": 8})
    assert isinstance(simulated, SimulatedNode)
    data = yaml.safe_load(DEMO.read_text())
    data.pop("simulated")
    for backend in ("sglang", "real"):
        data["backend"] = backend
        node = make_node(parse_spec(data), "n", None)
        assert isinstance(node, RealNode) and node.engine is engine_for(EngineName.SGLANG)
        plan = node.plan(make_config(0.8, 64, 16, 2, 1, 3), 30001, tmp_path)
        assert plan.argv[1:3] == ("-m", node.engine.launch_module)
