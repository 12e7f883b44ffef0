"""tools/gpu-check.sh on a machine without SGLang: one FAIL line naming what is missing, no traceback."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(importlib.util.find_spec("sglang") is not None, reason="SGLang is installed here")
def test_without_sglang_one_line_names_it(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(sys.executable)  # this interpreter: everything but SGLang
    done = subprocess.run(
        ["bash", str(ROOT / "tools" / "gpu-check.sh")],
        env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "BUNDLE_DIR": str(tmp_path / "none")},
        capture_output=True,
        text=True,
        timeout=60,
    )
    out = done.stdout + done.stderr
    assert done.returncode == 1
    assert "Traceback" not in out and out.count("\n") == 1, out
    assert out.startswith("FAIL setup: sglang") and "not installed" in out
