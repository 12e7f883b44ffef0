"""Where a trial may run: one trial per whole node, on a node that declares the `TRIAL_SLOT` resource.

Imports nothing from the package, so that both the driver's loop and `cluster` (which starts the tasks)
can read the one name of the slot resource without an import cycle.
"""

from __future__ import annotations

from typing import Any

# The custom resource a node that takes trials declares once (the workers of `ray_cluster.yaml`, the
# local head `cluster.connect` starts); a trial asks for it, so nothing is ever packed beside it.
TRIAL_SLOT = "trial_slot"


def pick_node(
    alive_nodes: list[dict[str, Any]], busy: set[str], quarantined: set[str], *, gpus: int = 0
) -> str | None:
    """A node for the next trial: alive, declaring a trial slot (and `gpus` GPUs), neither busy nor
    quarantined. `alive_nodes` is `ray.nodes()` as is; the lowest node id wins so the choice is
    reproducible. None when no node qualifies (the driver waits rather than queueing in Ray, where a
    task pinned to a node would sit invisible to it)."""
    candidates = []
    for node in alive_nodes:
        node_id = str(node.get("NodeID", ""))
        resources = node.get("Resources") or {}
        if (
            node_id
            and node.get("Alive")
            and resources.get(TRIAL_SLOT, 0) >= 1
            and resources.get("GPU", 0) >= gpus
            and node_id not in busy
            and node_id not in quarantined
        ):
            candidates.append(node_id)
    return min(candidates) if candidates else None


def pinned_to(node_id: str) -> dict[str, Any]:
    """`.options()` that run a task on exactly `node_id` (fails, not waits, if that node dies)."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return {"scheduling_strategy": NodeAffinitySchedulingStrategy(node_id, soft=False)}
