from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def demo_spec(tmp_path: Path) -> Any:
    """Write a variant of the demo spec and return its path."""

    def make(**changes: Any) -> Path:
        data = yaml.safe_load((ROOT / "trials" / "demo.yaml").read_text())
        for dotted, value in changes.items():
            node = data
            *parents, leaf = dotted.split("__")
            for key in parents:
                node = node[key]
            node[leaf] = value
        path = tmp_path / "spec.yaml"
        path.write_text(yaml.safe_dump(data))
        return path

    return make
