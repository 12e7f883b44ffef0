"""The sampler learns the OOM boundary from PRUNED trials with a violated constraint.

A pure Optuna test of our tell logic and search space: the "server" is a rule (too little memory
fraction for the captured graphs = OOM), so it runs in a second and can fail on a real bug in
`tell_outcome` or `suggest_config` (telling OOMs as FAIL, for one, makes this test fail).
"""

from __future__ import annotations

from pathlib import Path

import optuna

from orchestrator.records import ServerConfig, TrialStatus
from orchestrator.space import suggest_config
from orchestrator.spec import load_spec
from orchestrator.study import open_study, tell_outcome

DEMO = Path(__file__).resolve().parents[1] / "trials" / "demo.yaml"


def ooms(c: ServerConfig) -> bool:
    return c.mem_fraction_static < 0.80 + c.cuda_graph_max_bs / 512 * 0.08


def tok_s(c: ServerConfig) -> float:
    return 1000 * c.max_running_requests / 64 + 300 * (c.speculative_num_steps or 0) - c.cuda_graph_max_bs / 4


def run(sampler: optuna.samplers.BaseSampler | None, n: int, seed: int = 0) -> int:
    spec = load_spec(DEMO).model_copy(update={"sampler_seed": seed})
    if sampler is None:
        study = open_study(spec, "learn", "sqlite:///:memory:", resume=False)
    else:
        study = optuna.create_study(direction="maximize", sampler=sampler)
    inside = 0
    for i in range(n):
        trial = study.ask()
        config = suggest_config(trial, spec.search)
        bad = ooms(config)
        if i >= 10 and bad:
            inside += 1
        status = TrialStatus.OOM if bad else TrialStatus.OK
        tell_outcome(study, trial, status, None if bad else tok_s(config), pruned=False)
    return inside


def test_tpe_with_constraint_avoids_the_oom_region_more_than_random() -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    n = 50
    ours = sum(run(None, n, seed=s) for s in range(3)) / 3
    random = sum(run(optuna.samplers.RandomSampler(seed=s), n) for s in range(3)) / 3
    assert ours < 0.7 * random, (ours, random)
