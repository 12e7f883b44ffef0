"""The simulated node against real SGLang 0.5.17: same parser, same fields, same line shapes.

The real logs are from specsweep's own sweep on an H200 (`fixtures/sglang/0.5.17/specsweep-h200/`). The
simulated node runs the same configurations with the `h200-tiny` profile and must come out the same:
same outcome and stage, memory figures within 5 %, and every line the parser relies on in the same shape.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from orchestrator.engines.sglang.logparse import SglangLogReport, parse_log

REAL = Path(__file__).resolve().parent / "fixtures" / "sglang" / "0.5.17" / "specsweep-h200"
COMMON = [
    "--model-path",
    "/models/tiny-llama",
    "--speculative-algorithm",
    "EAGLE3",
    "--speculative-draft-model-path",
    "/models/tiny-llama-eagle3",
    "--speculative-num-steps",
    "3",
    "--speculative-eagle-topk",
    "1",
    "--speculative-num-draft-tokens",
    "4",
    "--skip-tokenizer-init",
    "--attention-backend",
    "triton",
    "--sampling-backend",
    "pytorch",
    "--grammar-backend",
    "none",
    "--tp-size",
    "1",
    "--host",
    "127.0.0.1",
]
CASES = {
    "ok-accept.log": [
        "--mem-fraction-static",
        "0.85",
        "--cuda-graph-max-bs-decode",
        "16",
        "--max-running-requests",
        "16",
    ],
    "kv-oom.log": [
        "--mem-fraction-static",
        "0.001",
        "--cuda-graph-max-bs-decode",
        "16",
        "--max-running-requests",
        "16",
    ],
    "graph-oom.log": [
        "--mem-fraction-static",
        "0.99",
        "--cuda-graph-max-bs-decode",
        "512",
        "--max-running-requests",
        "512",
    ],
}
# The lines the parser reads, by their fixed start.
KEYS = (
    "Load weight begin",
    "Load weight end",
    "KV Cache is allocated",
    "Memory pool end",
    "Capture ",
    "max_total_num_tokens=",
    "The server is fired up",
    "Decode batch",
    "Prefill batch",
)


def simulate(tmp_path: Path, flags: list[str], port: int) -> str:
    log = tmp_path / "sim.log"
    argv = [
        sys.executable,
        "-m",
        "orchestrator.sim.server",
        *COMMON,
        *flags,
        "--port",
        str(port),
        "--sim-profile",
        "h200-tiny",
        "--sim-state-dir",
        str(tmp_path / "gpus"),
        "--sim-startup-time-scale",
        "0",
    ]
    with log.open("w") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while proc.poll() is None and time.monotonic() < deadline:
            if "fired up and ready" in log.read_text():
                break
            time.sleep(0.05)
        if proc.poll() is None:
            proc.send_signal(2)
            proc.wait(timeout=10)
    return log.read_text()


def shape(line: str) -> str:
    body = re.sub(r"^\[[^\]]*\] ", "", line)
    return re.sub(r"\d+(\.\d+)?", "N", body)


def parser_lines(text: str) -> set[str]:
    out = set()
    for line in text.splitlines():
        body = re.sub(r"^\[[^\]]*\] ", "", line)
        if body.startswith(KEYS):
            # A captured list of sizes differs by configuration, not by shape.
            out.add(re.sub(r"\[[N, ]*\]", "[...]", shape(line)))
    return out


# The memory figures each real log holds, by where its server got to: the weights (and what was left at
# the end) always; the KV pool once it was allocated; the CUDA graphs once they were captured.
WEIGHTS = ("avail_at_start_gb", "weights_gb", "draft_weights_gb", "avail_end_gb")
KV = ("kv_cache_tokens", "kv_cache_gb", "draft_kv_cache_gb")
GRAPHS = ("graph_gb", "draft_graph_gb")
ALL_FIGURES = (*WEIGHTS, *KV, *GRAPHS)
FIGURES = {
    "ok-accept.log": ALL_FIGURES,
    "kv-oom.log": WEIGHTS,
    "graph-oom.log": (*WEIGHTS, *KV),
}


def test_every_case_says_which_figures_its_log_holds() -> None:
    assert set(FIGURES) == set(CASES)


def close(a: float | None, b: float | None, rel: float = 0.05, abs_: float = 0.02) -> bool:
    assert a is not None and b is not None
    return abs(a - b) <= max(rel * abs(a), abs_)


@pytest.mark.parametrize("case", sorted(CASES))
def test_simulator_matches_real_sglang(case: str, tmp_path: Path) -> None:
    from orchestrator.node.backends import free_port

    real: SglangLogReport = parse_log((REAL / case).read_text())
    text = simulate(tmp_path, CASES[case], free_port("127.0.0.1", 31000))
    sim = parse_log(text)
    assert sim.ready == real.ready
    if real.failure is None:
        assert sim.failure is None
    else:
        assert sim.failure is not None
        assert (sim.failure.stage, sim.failure.kind) == (real.failure.stage, real.failure.kind)
    rm, sm = real.memory, sim.memory
    expected = FIGURES[case]
    for field in ALL_FIGURES:
        if field in expected:
            # The log has this figure: a None is the parser losing it, never a reason to skip.
            assert getattr(rm, field) is not None, f"the parser found no {field} in the real {case}"
            assert close(getattr(rm, field), getattr(sm, field)), (
                field,
                getattr(rm, field),
                getattr(sm, field),
            )
        else:  # the server failed before this figure: neither log may have it
            assert getattr(rm, field) is None and getattr(sm, field) is None, field
    if real.args is not None:
        assert sim.args is not None
        for field in (
            "mem_fraction_static",
            "cuda_graph_max_bs",
            "max_running_requests",
            "speculative_num_steps",
            "effective_max_running_requests",
        ):
            assert getattr(sim.args, field) == getattr(real.args, field), field
    missing = parser_lines(text) - parser_lines((REAL / case).read_text())
    assert not missing, f"simulator lines with no real counterpart: {sorted(missing)[:5]}"


# tok/s of one configuration on a real H200 (SGLang 0.5.17): three repeats per stage size on one server,
# then the same after a restart. Sub-second stages are 16 x 64 tokens; 12 s stages 256 x 256 and 512 x 256.
H200_SHORT = ((4671, 4072, 4131), (3468, 3850, 4595))
H200_LONG = (((5776, 5795, 6402), (5419, 5583, 5298)), ((10284, 10836, 10892), (9734, 9871, 9657)))


def _spread(values: tuple[float, ...] | list[float]) -> float:
    return (max(values) - min(values)) / (sum(values) / len(values))


def _median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


@pytest.mark.parametrize("profile", ["h200-tiny"])
def test_simulated_spread_matches_the_h200_measurements(profile: str) -> None:
    """Over many launches the simulated noise of an overhead-bound profile (these measurements are the
    tiny model's) spreads tok/s as the real server did: sub-second stages by about 15 %, 12 s stages by
    2-10 % within a server, and two starts by 6-9 %. The GPU-bound profiles are held to their own regime
    in tests/sim/test_sim_regime_noise.py."""
    from orchestrator.sim.profile import load_profile
    from orchestrator.sim.speed import SlowNoise

    p = load_profile(profile)
    real_short = sum(_spread(r) for r in H200_SHORT) / len(H200_SHORT)
    real_long = [_spread(r) for pair in H200_LONG for r in pair]
    real_launch = [abs(sum(a) / sum(b) - 1) for a, b in (H200_SHORT, *H200_LONG)]
    short, long, launch = [], [], []
    for seed in range(200):
        a = SlowNoise(p.launch_noise, p.drift_noise, p.drift_period_s, seed)
        b = SlowNoise(p.launch_noise, p.drift_noise, p.drift_period_s, seed + 100_000)
        short.append(_spread([a.mean_factor(t, 0.25) for t in (0.0, 2.0, 4.0)]))
        la = [a.mean_factor(t, 12.0) for t in (10.0, 23.0, 36.0)]
        lb = [b.mean_factor(t, 12.0) for t in (10.0, 23.0, 36.0)]
        long.append(_spread(la))
        launch.append(abs(sum(la) / sum(lb) - 1))
    # Medians of the simulated spread against the measured range (with room for three-sample figures).
    assert 0.5 * real_short <= _median(short) <= 1.5 * real_short
    assert min(real_long) <= _median(long) <= max(real_long)
    assert 0.7 * min(real_launch) <= _median(launch) <= max(real_launch)
    # The long stage is the better measurement, but not a noise-free one.
    assert _median(long) < 0.5 * _median(short)
