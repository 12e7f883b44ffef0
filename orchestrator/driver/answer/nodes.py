"""Whether the answer and the server without speculation were measured on one node.

The confidence statement counts the noise between launches on a node (`driver.answer.noise`). Nodes of
one kind differ by more than that where the host's CPU sets the pace (a small target's decode step):
the real pair's grid, launched on four H100 machines over four sessions, had its baseline on the first
and its fastest trees on the fourth. A gap measured across nodes is said to be one.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from orchestrator.driver.answer.choose import Answer
from orchestrator.driver.answer.confirm import apart, candidates, machines, rank
from orchestrator.records import TrialRecord


def node_note(answer: Answer, records: Sequence[TrialRecord], lossy: Collection[int] = ()) -> str:
    """A line for the console when the answer's speculative configuration (or, when the answer is the
    baseline, the best speculative one) and the baseline never ran on the same node; '' otherwise."""
    if answer.nospec:
        ranked = rank(candidates(records, lossy))
        if not ranked:
            return ""
        label = ranked[0].config.label()
    else:
        label = answer.config
    if not apart(records, label):
        return ""
    base_nodes, spec_nodes = machines(records, label)
    return (
        f"note: {label} and the server without speculation never ran on the same node ({len(spec_nodes)} "
        f"node(s) against {len(base_nodes)}): the gap between them includes what differs from node to "
        "node, which the confidence above does not count; launch both on one node to settle it"
    )
