"""`make sweep > file`: with stdout not a terminal the CLI prints one plain line per trial event, so a log
file shows each trial start, go through its phases and finish."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_a_piped_sweep_prints_each_trial_event_on_its_own_line(tmp_path: Path, demo_spec: Any) -> None:
    spec = demo_spec(budget__trials=2, workload__num_prompts=8, workload__concurrency=[4, 8])
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "orchestrator.sweep",
            str(spec),
            "--out",
            str(tmp_path / "runs"),
            "--no-dashboard",
        ],
        cwd=ROOT,
        capture_output=True,  # a pipe, as `make sweep > file` gives a file: not a terminal
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert "\r" not in out  # no live line redrawn in place
    lines = out.splitlines()
    finished = [int(m.group(1)) for ln in lines if (m := re.match(r"  trial +(\d+) (ok|oom|failed)\b", ln))]
    assert len(finished) == 3, out  # the baseline runs on top of the 2-trial budget
    for number in finished:
        mine = [ln for ln in lines if re.match(rf"  trial +{number} ", ln)]
        events = [ln.split(f"trial {number:3d} ", 1)[1] for ln in mine]
        assert events[0].startswith("started on node "), mine
        assert re.search(r"^ok |^oom |^failed ", events[-1]), mine
        # The start line names the phase the driver saw first (reports travel in batches).
        first = events[0].split(": ", 1)[1]
        phases = [first] + [re.sub(r" \(at [\d.]+ s\)$", "", e) for e in events[1:-1]]
        assert phases[0] in ("checking GPUs", "starting the server"), mine
        assert "starting the server" in phases, mine
        if events[-1].startswith("ok"):
            assert "loading weights" in phases and "capturing CUDA graphs" in phases, mine
            assert phases.index("benchmarking stage 1 of 2") < phases.index("benchmarking stage 2 of 2"), mine
            assert phases[-1] == "stopping", mine
        assert len(phases) == len(set(phases)), mine  # one line per change, none repeated
        seconds = [float(s) for s in re.findall(r"\(at ([\d.]+) s\)$", "\n".join(mine), re.M)]
        assert seconds == sorted(seconds), mine
