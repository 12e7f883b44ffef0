"""The report drawn by a real browser with the network cut off: every plot must render from the
page alone. Skipped where no Chromium is installed."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from orchestrator.report import write_report
from tests.browser import HEADLESS, require_chromium
from tests.report_fixture import STUDY, build_store

pytestmark = pytest.mark.browser
PLOT_IDS = ("plot-feasibility", "plot-pareto", "plot-acceptance", "plot-history", "plot-importance")
SCREENSHOT = Path(__file__).parents[1] / "artifacts" / "report.png"


def run_chromium(binary: str, profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    flags = [
        *HEADLESS,
        "--disable-quic",
        # No name resolves and no proxy answers: a page that needs the network draws nothing.
        "--host-resolver-rules=MAP * ~NOTFOUND",
        "--proxy-server=127.0.0.1:9",
        f"--user-data-dir={profile}",
        "--window-size=1400,3000",
        "--virtual-time-budget=5000",
    ]
    return subprocess.run([binary, *flags, *args], capture_output=True, text=True, timeout=180, check=False)


@pytest.fixture(scope="module")
def report_html(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("browser")
    store = build_store(root)
    return write_report(STUDY, store.tracking_uri, store.storage, store.study_dir / "report.html")


@pytest.mark.slow  # headless Chromium draws every plot
def test_every_plot_is_drawn_offline(report_html: Path, tmp_path: Path) -> None:
    binary = require_chromium()
    done = run_chromium(binary, tmp_path / "profile", "--dump-dom", report_html.as_uri())
    assert done.returncode == 0, done.stderr[-2000:]
    dom = done.stdout
    # Each chunk runs from a plot's div to the next one; plotly fills the div with its SVG layers.
    starts = {pid: dom.find(f'id="{pid}"') for pid in PLOT_IDS}
    assert all(pos >= 0 for pos in starts.values()), starts
    order = sorted(starts.values())
    for pid, pos in starts.items():
        end = next((p for p in order if p > pos), len(dom))
        chunk = dom[pos:end]
        assert 'class="main-svg"' in chunk, f"{pid} was not drawn"
    feasibility = dom[starts["plot-feasibility"] :]
    assert re.search(r'class="point', feasibility), "the feasibility map has no markers"

    SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
    shot = run_chromium(binary, tmp_path / "profile2", f"--screenshot={SCREENSHOT}", report_html.as_uri())
    assert shot.returncode == 0, shot.stderr[-2000:]
    assert SCREENSHOT.stat().st_size > 50_000  # a blank page compresses to a few kB
