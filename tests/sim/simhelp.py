"""Shared helpers for the simulated-node tests: resolve a launch like the server does."""

from __future__ import annotations

from orchestrator.sim.args import SimArgs, parse
from orchestrator.sim.memory import StartupPlan, plan_startup
from orchestrator.sim.profile import SimProfile, load_profile

KIMI = "kimi-k25-rtxpro6000"
TINY = "h200-tiny"


def spec(steps: int, topk: int, draft: int, algo: str = "EAGLE3") -> list[str]:
    return [
        "--speculative-algorithm", algo, "--speculative-draft-model-path", "/models/draft",
        "--speculative-num-steps", str(steps), "--speculative-eagle-topk", str(topk),
        "--speculative-num-draft-tokens", str(draft),
    ]  # fmt: skip


def resolve(profile: str | dict[str, object], *flags: str) -> tuple[SimArgs, SimProfile]:
    loaded = load_profile(profile)
    argv = [
        "--model-path",
        "/models/target",
        *flags,
        "--sim-profile",
        "unused",
        "--sim-state-dir",
        "/tmp/unused",
    ]
    return parse(argv, lambda _name: loaded)


def plan(profile: str | dict[str, object], *flags: str) -> tuple[SimArgs, StartupPlan]:
    args, prof = resolve(profile, *flags)
    return args, plan_startup(prof, args)
