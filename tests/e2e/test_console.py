"""The console of `make sweep` as a new user reads it: quiet, one table, a recommendation that uses
EAGLE-3, its command one flag per line, and plain files."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
from e2ehelp import GOOD, sweep

ROOT = Path(__file__).resolve().parents[2]


def test_study_name_is_one_plain_name(tmp_path: Path) -> None:
    proc = sweep(ROOT / "trials" / "demo.yaml", tmp_path / "runs", "--study", "a/b")
    assert proc.returncode == 2
    assert "--study" in proc.stderr and "'a/b'" in proc.stderr
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow
def test_one_trial_sweep_recommends_speculation_quietly(tmp_path: Path, demo_spec: Any) -> None:
    spec = demo_spec(known_good=[GOOD], workload__num_prompts=8, workload__concurrency=[8])
    out = tmp_path / "runs"
    proc = sweep(spec, out, "--trials", "1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    console = proc.stdout + proc.stderr
    for noise in ("ExperimentalWarning", "A new study created", "Token authentication"):
        assert noise not in console, noise

    # --trials 1 launches the baseline as the reference plus one speculative trial, and recommends that.
    rows = re.findall(r"^\s*(\d+) (\w+) .*  (mf\S+ gbs\d+ mrr\d+ \S+)", proc.stdout, re.M)
    assert [(n, s) for n, s, _ in rows] == [("0", "ok"), ("1", "ok")], proc.stdout
    assert rows[0][2].endswith("nospec") and rows[1][2].endswith("s3k1d4")
    assert "2 trials: 2 launched (the baseline + 1 of the 1-trial budget)" in proc.stdout
    best = re.search(r"^best: trial (\d+), [\d.]+ tok/s, [\d.]+x the baseline", proc.stdout, re.M)
    assert best is not None and best.group(1) == "1", proc.stdout

    script = (out / "demo" / "best_command.sh").read_text()
    lines = script.splitlines()
    # The simulated node's interpreter (this venv's) has no SGLang: not the one to serve with.
    assert lines[1] == "exec python3 -m sglang.launch_server \\"
    assert all(len(shlex.split(line.removesuffix(" \\"))) <= 2 for line in lines[2:]), script
    assert "  --speculative-algorithm EAGLE3 \\" in lines
    assert "\n".join(lines[1:]).removeprefix("exec ") in proc.stdout  # printed as saved

    summary = json.loads((out / "demo" / "summary.json").read_text())
    assert summary["trials_recorded"] == 2 and isinstance(summary["trials_recorded"], int)

    # The last line opens this sweep's store, not `make mlflow-ui`'s runs/mlflow.db of the checkout.
    last = proc.stdout.strip().splitlines()[-1]
    assert f"mlflow ui --backend-store-uri sqlite:///{out / 'mlflow.db'}" in last, last
    # A plain --resume keeps the study's own budget of 1 (it went back to the spec's 12): nothing to run.
    again = sweep(spec, out, "--resume")
    assert again.returncode == 0, again.stderr[-3000:]
    assert "already run 1 trial (budget 1): nothing to do" in again.stdout, again.stdout
