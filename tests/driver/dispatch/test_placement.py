"""Where a trial may run: the node choice, on hand-made node lists and on `ray.nodes()` of a real local
Ray, and the options that pin a real task to its node."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
import ray

from orchestrator.driver.dispatch.executor import OneNodeExecutor
from orchestrator.driver.dispatch.placement import TRIAL_SLOT, pick_node, pinned_to


def _node(node_id: str, alive: bool = True, slot: float = 1.0, gpus: float = 8.0) -> dict[str, Any]:
    resources: dict[str, float] = {"CPU": 192.0, "GPU": gpus}
    if slot:
        resources[TRIAL_SLOT] = slot
    return {"NodeID": node_id, "Alive": alive, "Resources": resources}


def test_pick_node_skips_dead_busy_quarantined_and_slotless_nodes() -> None:
    nodes = [
        _node("e-head", slot=0, gpus=0),
        _node("d-dead", alive=False),
        _node("c-busy"),
        _node("b-quarantined"),
        _node("f-free"),
    ]
    assert pick_node(nodes, busy={"c-busy"}, quarantined={"b-quarantined"}) == "f-free"
    assert pick_node(nodes, busy={"c-busy", "f-free"}, quarantined={"b-quarantined"}) is None


def test_pick_node_is_reproducible_and_checks_gpus() -> None:
    nodes = [_node("bbb"), _node("aaa", gpus=4), _node("ccc")]
    assert pick_node(nodes, set(), set()) == "aaa"
    assert pick_node(nodes, set(), set(), gpus=8) == "bbb"
    assert pick_node([], set(), set()) is None


# -- inside Ray ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def node_id() -> Iterator[str]:
    """A local Ray of one node that declares the trial slot, as the embedded cluster does."""
    if ray.is_initialized():
        ray.shutdown()
    try:
        ray.init(
            address="local",  # a new instance, never another Ray running on this machine
            num_cpus=1,
            resources={TRIAL_SLOT: 1},
            include_dashboard=False,
            logging_level=logging.WARNING,
            log_to_driver=False,
        )
        yield ray.get_runtime_context().get_node_id()
    finally:
        ray.shutdown()


@pytest.mark.slow  # starts a local Ray
def test_pick_node_reads_ray_nodes_as_ray_returns_them(node_id: str) -> None:
    assert pick_node(ray.nodes(), set(), set()) == node_id
    assert pick_node(ray.nodes(), set(), {node_id}) is None


@ray.remote(num_cpus=0)
def _where() -> str:
    return ray.get_runtime_context().get_node_id()


@pytest.mark.slow  # starts a local Ray
def test_pinned_options_steer_a_real_task(node_id: str) -> None:
    assert ray.get(_where.options(**pinned_to(node_id)).remote(), timeout=30) == node_id


def test_an_in_process_executor_offers_its_one_node_with_one_slot_and_its_gpus() -> None:
    # The tests and the search benchmark run the sweep on `OneNodeExecutor`s: the driver must place
    # their trials exactly as on a Ray node that declares one trial slot.
    one = OneNodeExecutor("node-a", 8.0)
    assert one.trial_slots() == 1
    assert pick_node(one.alive_nodes(), set(), set(), gpus=8) == "node-a"
    assert pick_node(one.alive_nodes(), set(), set(), gpus=9) is None
    assert pick_node(one.alive_nodes(), {"node-a"}, set()) is None
