"""Headless Chromium for the browser tests: where to find it and the flags every run needs."""

from __future__ import annotations

import shutil
from pathlib import Path


def chromium() -> str | None:
    """Headless Chromium (.ci/run installs Debian's), or None."""
    if Path("/usr/bin/chromium").exists():
        return "/usr/bin/chromium"
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


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
