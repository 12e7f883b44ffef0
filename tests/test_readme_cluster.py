"""The README's Ray-cluster quick start does every step ray_cluster.yaml asks for before a sweep runs."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def quick_start() -> str:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## On a Ray cluster", 1)[1]
    block = re.search(r"```sh\n(.*?)```", section, re.S)
    assert block, "the section has no command block"
    return block.group(1)


def test_the_quick_start_has_what_ray_cluster_yaml_lists() -> None:
    steps = quick_start()
    cluster_yaml = (ROOT / "ray_cluster.yaml").read_text()
    for needed in ("RAY_AUTH_MODE=token", "SPECSWEEP_SOURCE", "ray rsync-up", "--ray-address auto"):
        assert needed in cluster_yaml  # the file asks for it ...
        assert needed in steps, needed  # ... and the quick start does it
    # The sweep runs the spec that was synced to the head, not a path of the launching machine.
    synced = re.search(r"ray rsync-up ray_cluster.yaml \S+ '(\S+)'", steps)
    assert synced and f"orchestrator.sweep {synced.group(1)} --ray-address auto" in steps
