"""`tools/pair/on-node.sh sweep` refuses at once, with the fix, when the product's bundle is not loaded."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_sweep_without_the_products_dependencies_says_which_bundle_to_load(tmp_path: Path) -> None:
    # `-S`: an interpreter without its site-packages stands for a node where only SGLang's bundle is loaded
    # (on the H100 the sweep then died in the background on `import pydantic`, seen only after a wait).
    run = subprocess.run(
        [
            "bash",
            "tools/pair/on-node.sh",
            "sweep",
            "trials/smollm2-h200-grid.yaml",
            str(tmp_path / "g"),
            "60",
        ],
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "PYTHON": f"{sys.executable} -S", "PAIR": str(tmp_path / "pair")},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 2
    assert "ssweep-unpack.sh" in run.stderr
    assert not (tmp_path / "g.console").exists()  # nothing started in the background
