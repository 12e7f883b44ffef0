from __future__ import annotations

from pathlib import Path

from orchestrator.engines.engine import LaunchSettings, TrialLaunch
from orchestrator.engines.launch import launch_plan
from orchestrator.engines.sglang.command import parse_version, render_flags
from orchestrator.secrets import mask_argv
from orchestrator.spec.search import make_config
from orchestrator.spec.sweep_spec import Backend, load_spec

DEMO = Path(__file__).resolve().parents[3] / "trials" / "demo.yaml"


def test_versions() -> None:
    assert parse_version("0.5.5.post3") == (0, 5, 5)
    assert parse_version("0.5.17") == (0, 5, 17)
    assert parse_version("0.5.23rc1") == (0, 5, 23)


def test_flags_per_version_and_speculation_together() -> None:
    spec = load_spec(DEMO)
    cfg = make_config(0.88, 128, 48, 3, 1, None)
    old = render_flags(
        TrialLaunch(LaunchSettings.from_spec(spec), cfg, version="0.5.9", port=31000, tp_size=8)
    )
    new = render_flags(
        TrialLaunch(LaunchSettings.from_spec(spec), cfg, version="0.5.23", port=31000, tp_size=8)
    )
    assert "--cuda-graph-max-bs" in old and "--cuda-graph-max-bs-decode" not in old
    assert "--cuda-graph-max-bs-decode" in new and "--cuda-graph-max-bs" not in new
    i = new.index("--speculative-num-steps")
    assert new[i : i + 6] == [
        "--speculative-num-steps",
        "3",
        "--speculative-eagle-topk",
        "1",
        "--speculative-num-draft-tokens",
        "4",
    ]
    assert new[new.index("--tp-size") + 1] == "8"
    assert new[new.index("--port") + 1] == "31000"
    assert new[new.index("--host") + 1] == "127.0.0.1"


def test_baseline_has_no_speculative_flags() -> None:
    spec = load_spec(DEMO)
    flags = render_flags(
        TrialLaunch(
            LaunchSettings.from_spec(spec), make_config(0.88, 128, 48), version="0.5.17", port=1, tp_size=8
        )
    )
    assert not [f for f in flags if f.startswith("--speculative")]


def test_backends_share_flags() -> None:
    spec = load_spec(DEMO)
    cfg = make_config(0.88, 128, 48, 2, 2, 4)
    sim = launch_plan(
        spec, cfg, version="0.5.17", port=30001, tp_size=8, sim_profile_path="p.json", sim_state_dir="/s"
    )
    real = launch_plan(
        spec.model_copy(update={"backend": Backend.SGLANG}), cfg, version="0.5.17", port=30001, tp_size=8
    )
    assert real.argv[1:3] == ("-m", "sglang.launch_server")
    assert sim.argv[1:3] == ("-m", "orchestrator.sim.server")
    assert real.argv[3:] == sim.argv[3 : 3 + len(real.argv) - 3]


def test_secrets_masked() -> None:
    assert mask_argv(["x", "--api-key", "s3cret", "--hf-token=abc"]) == (
        "x",
        "--api-key",
        "****",
        "--hf-token=****",
    )


def test_graph_bs_flag_boundary_versions() -> None:
    """Read off the wheels: 0.5.9 knows only --cuda-graph-max-bs; 0.5.14 is the first with the per-phase
    --cuda-graph-max-bs-decode (the old name an alias until 0.5.23 drops it)."""
    spec = load_spec(DEMO)
    cfg = make_config(0.88, 128, 48, 3, 1, None)
    for version, flag in [
        ("0.5.9", "--cuda-graph-max-bs"),
        ("0.5.14", "--cuda-graph-max-bs-decode"),
        ("0.5.14.post1", "--cuda-graph-max-bs-decode"),
        ("0.5.19", "--cuda-graph-max-bs-decode"),
        ("0.5.23", "--cuda-graph-max-bs-decode"),
    ]:
        flags = render_flags(
            TrialLaunch(LaunchSettings.from_spec(spec), cfg, version=version, port=31000, tp_size=8)
        )
        i = flags.index(flag)
        assert flags[i + 1] == "128", version
        other = {"--cuda-graph-max-bs", "--cuda-graph-max-bs-decode"} - {flag}
        assert not other & set(flags), version
