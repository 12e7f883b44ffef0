"""`python -m orchestrator.driver.memory.fit`: the prior's figures for one configuration, before any GPU.

Nothing is claimed or launched."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.driver.memory.fit import main

ROOT = Path(__file__).resolve().parents[3]
TARGET = str(ROOT / "trials/models/llama3-8b-shape")
DRAFT = str(ROOT / "trials/models/llama3-8b-eagle3-shape")
H200 = ["--gpu-memory-mib", "143771"]


def test_json_gives_the_figures_and_the_verdict(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main([TARGET, "--draft", DRAFT, *H200, "--fraction", "0.85", "--cuda-graph-max-bs", "64", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["fits"] is True
    for key in ("weights_gb", "draft_weights_gb", "kv_tokens", "kv_gb", "graph_gb", "floor_fraction"):
        assert key in out
    assert out["weights_gb"] == pytest.approx(14.98, rel=0.02)
    assert out["draft_weights_gb"] == pytest.approx(2.14, rel=0.02)
    assert out["floor_fraction"] == pytest.approx(0.1237, abs=0.0005)


def test_a_configuration_that_cannot_fit_says_where(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [TARGET, "--draft", DRAFT, *H200, "--fraction", "0.98", "--cuda-graph-max-bs", "256"]
    rc = main([*argv, "--max-running-requests", "256", "--steps", "4", "--topk", "2", "--draft-tokens", "8"])
    text = capsys.readouterr().out
    assert rc == 1 and "draft_graph_capture" in text and "ceiling fraction" in text


@pytest.mark.parametrize(
    ("argv", "names"),
    [
        (["/no/such/model", *H200, "--fraction", "0.8"], "/no/such/model/config.json"),
        ([TARGET, *H200, "--fraction", "1.2"], "--fraction"),
        ([TARGET, *H200, "--fraction", "0.8", "--steps", "3"], "--draft"),
        ([TARGET, "--gpu-memory-mib", "0", "--fraction", "0.8"], "--gpu-memory-mib"),
    ],
)
def test_bad_input_exits_2_naming_the_file_or_flag(
    argv: list[str], names: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    assert names in capsys.readouterr().err


def test_it_runs_as_a_module() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "orchestrator.driver.memory.fit",
            TARGET,
            *H200,
            "--fraction",
            "0.85",
            "--json",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode == 0 and json.loads(done.stdout)["kv_tokens"] > 800_000
