"""What the package reads at run time ships with it: a wheel, or a git URL's install (as ray_cluster.yaml
installs the nodes), holds every data file under orchestrator/.

Built from a wheel, the simulated node's profiles were missing: `error: simulated.profile: no simulated
profile 'kimi-k25-rtxpro6000': give a file path or one of ` (an empty list)."""

from __future__ import annotations

import fnmatch
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_data_file_of_the_package_is_package_data() -> None:
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    patterns = setuptools.get("package-data", {}).get("orchestrator", [])
    package = ROOT / "orchestrator"
    data = [
        p.relative_to(package).as_posix()
        for p in package.rglob("*")
        if p.is_file() and p.suffix not in (".py", ".pyc") and "__pycache__" not in p.parts
    ]
    assert data  # the simulated profiles at least
    missing = [f for f in data if not any(fnmatch.fnmatch(f, pat) for pat in patterns)]
    assert not missing, f"add to [tool.setuptools.package-data] orchestrator: {missing}"
