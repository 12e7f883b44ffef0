"""Several simulated 8-GPU nodes on one Ray cluster: one trial per node, all nodes busy."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from e2ehelp import sim_cluster
from ray.cluster_utils import Cluster

from orchestrator.cli import resolve_profile
from orchestrator.driver.dispatch import cluster
from orchestrator.driver.loop.sweep import Sweep
from orchestrator.driver.store.study import open_study
from orchestrator.driver.store.tracking import Tracker
from orchestrator.spec.sweep_spec import load_spec


@pytest.fixture
def three_nodes() -> Iterator[Cluster]:
    with sim_cluster(3) as c:
        yield c


@pytest.mark.slow
def test_three_trials_in_flight_never_two_on_a_node(
    three_nodes: Cluster, tmp_path: Path, demo_spec: Any
) -> None:
    spec = load_spec(demo_spec(budget__trials=6, budget__baseline=False, known_good=[]))
    info = cluster.connect(spec, three_nodes.address)
    assert info.slots == 3
    study = open_study(spec, "cluster", f"sqlite:///{tmp_path / 'o.db'}", resume=False)
    tracker = Tracker(f"sqlite:///{tmp_path / 'm.db'}", "cluster", tmp_path / "spool")
    tracker.start("t", {}, {})
    sweep = Sweep(spec, study, tracker, n_trials=6, workdir=tmp_path, sim_profile=resolve_profile(spec))
    sweep.prepare(resume=False)
    outcome = sweep.run()
    launched = [r.result for r in outcome.records if r.result.node_id]
    assert len(launched) == 6
    # Each trial names the Ray node it ran on (the task hands the node its id; the node knows no Ray).
    assert {r.node_id for r in launched} == {n["NodeID"] for n in cluster.alive_nodes()}
    spans = [(r.started_unix, r.finished_unix, r.node_id) for r in launched]
    # Never two trials at once on one node.
    for i, (s1, e1, n1) in enumerate(spans):
        for s2, e2, n2 in spans[i + 1 :]:
            if n1 == n2:
                assert e1 <= s2 or e2 <= s1, "two trials overlapped on one node"
    # All three nodes were busy at once at some moment.
    events = sorted([(s, 1) for s, _, _ in spans] + [(e, -1) for _, e, _ in spans])
    level = peak = 0
    for _, step in events:
        level += step
        peak = max(peak, level)
    assert peak == 3
    assert len({n for _, _, n in spans}) == 3
