"""Headless Chromium for the browser tests: where to find it and the flags every run needs."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

NO_CHROMIUM = "no Chromium: install it (Debian: apt-get install chromium) to run the browser tests"


def chromium() -> str | None:
    """Headless Chromium (.ci/run installs Debian's), or None."""
    if Path("/usr/bin/chromium").exists():
        return "/usr/bin/chromium"
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


def under_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def require_chromium() -> str:
    """Chromium for a browser test. Without it the test skips, except under CI (CI=true, which .ci/run
    sets): there it fails, or a CI run with every browser test skipped would be green having looked at
    no page."""
    binary = chromium()
    if binary is not None:
        return binary
    if under_ci():
        pytest.fail(f"CI=true and {NO_CHROMIUM}; the browser tests must run in CI", pytrace=False)
    pytest.skip(NO_CHROMIUM)


# What every headless run needs: no sandbox as root, no GPU, nothing fetched from outside.
HEADLESS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
)
