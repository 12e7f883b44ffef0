"""`--help` and a bad input answer in a second, not after mlflow, Ray and Optuna have loaded.

Seen: `--help` and every exit-2 error took 3.5-7.8 s on a loaded 2-core machine, most of it importing
mlflow (and pandas under it) before argparse ran. The CLI's module imports only what parsing the flags
and checking the spec need; the rest loads once a sweep really starts.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("mlflow", "ray", "optuna", "pandas", "matplotlib", "aiohttp")
LOADED = f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))"


def _python(code: str, tmp_path: Path) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env={"PYTHONPATH": str(ROOT), "PATH": ""},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr


def test_importing_the_cli_loads_no_heavy_library(tmp_path: Path) -> None:
    assert _python(f"import sys, orchestrator.cli; {LOADED}", tmp_path) == "[]"


def test_help_and_a_bad_input_load_no_heavy_library(tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text((ROOT / "trials" / "demo.yaml").read_text().replace("gpus: 8", "gpus: 0", 1))
    argv_sets = [
        ["--help"],
        [str(spec), "--out", str(tmp_path / "runs")],  # a spec error
        [str(ROOT / "trials" / "demo.yaml"), "--out", str(tmp_path / "runs"), "--tracking-uri", "bogus"],
    ]
    for argv in argv_sets:
        code = (
            "import sys\nfrom orchestrator import cli\ntry:\n    rc = cli.main("
            f"{argv!r})\nexcept SystemExit as e:\n    rc = e.code\nassert rc in (0, 2), rc\n{LOADED}"
        )
        assert _python(code, tmp_path) == "[]", argv
    assert not (tmp_path / "runs").exists()
