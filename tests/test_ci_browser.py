"""CI cannot be green with the browser tests skipped: .ci/run fails when Chromium cannot be installed,
and under CI=true (which it exports) a browser test without Chromium fails instead of skipping."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests import browser

ROOT = Path(__file__).resolve().parents[1]


def test_without_chromium_a_browser_test_skips_outside_ci_and_fails_under_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(browser, "chromium", lambda: None)
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception):
        browser.require_chromium()
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI=true and no Chromium"):
        browser.require_chromium()


def _stub(folder: Path, name: str, body: str) -> None:
    path = folder / name
    path.write_text(f"#!/bin/bash\n{body}\n")
    path.chmod(0o755)


def _run_ci(
    tmp_path: Path, apt_get_rc: int, extra_env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """.ci/run, copied into a bare repository under tmp_path, with only stubs on PATH: no chromium, an
    apt-get that exits `apt_get_rc` (and, when it succeeds, installs a chromium stub), and a `make` that
    records the CI variable it sees. The copy's .venv holds stubs too (a python without torch, a pip that
    records its arguments in pip.txt), so the script's torch step never reaches the developer's venv."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("dirname", "bash"):
        found = shutil.which(tool)
        assert found
        (bin_dir / tool).symlink_to(found)
    install = (
        f'[ "$1" = install ] && printf "#!/bin/bash\\n" > {bin_dir}/chromium && chmod +x {bin_dir}/chromium'
    )
    _stub(bin_dir, "apt-get", f"[ {apt_get_rc} = 0 ] || exit {apt_get_rc}; {install}; exit 0")
    _stub(bin_dir, "make", f'echo "make $* CI=$CI" > {tmp_path}/make.txt')
    repo = tmp_path / "repo"
    (repo / ".ci").mkdir(parents=True)
    shutil.copy(ROOT / ".ci" / "run", repo / ".ci" / "run")
    venv_bin = repo / ".venv" / "bin"
    venv_bin.mkdir(parents=True)
    _stub(venv_bin, "python", f'echo "python $*" >> {tmp_path}/python.txt; exit 1')
    _stub(venv_bin, "pip", f'echo "pip $*" >> {tmp_path}/pip.txt; exit 0')
    return subprocess.run(
        [str(bin_dir / "bash"), str(repo / ".ci" / "run")],
        env={"PATH": str(bin_dir), "HOME": os.environ.get("HOME", "/root"), **(extra_env or {})},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_ci_fails_naming_why_when_chromium_cannot_be_installed(tmp_path: Path) -> None:
    done = _run_ci(tmp_path, apt_get_rc=100)
    assert done.returncode != 0
    assert "could not install chromium" in done.stderr and "browser tests" in done.stderr
    assert not (tmp_path / "make.txt").exists()  # no test run that would skip them


def test_ci_runs_the_tests_with_ci_set_once_chromium_is_there(tmp_path: Path) -> None:
    done = _run_ci(tmp_path, apt_get_rc=0, extra_env={"SPECSWEEP_CI_TORCH": "skip"})
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "make.txt").read_text().strip() == "make test CI=true"
    # SPECSWEEP_CI_TORCH=skip: no look for torch, no pip install of it
    assert not (tmp_path / "python.txt").exists()
    assert not (tmp_path / "pip.txt").exists()


def test_ci_installs_torch_when_it_is_missing_and_no_skip_is_asked(tmp_path: Path) -> None:
    done = _run_ci(tmp_path, apt_get_rc=0)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "python.txt").read_text().strip() == "python -c import torch"
    assert (tmp_path / "pip.txt").read_text().strip() == "pip install -q torch==2.13.0"
    assert (tmp_path / "make.txt").read_text().strip() == "make test CI=true"
