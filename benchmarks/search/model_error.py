"""What the policy's speculation model gets wrong on the real-derived cases (`benchmarks.truth.real_derived`).

On the parametric cases the simulator draws acceptance from the family the policy fits, so its model can
be exact. Here the truth is measured H200 steps and published accept lengths, and the model can be as
wrong as real speculation is unlike its family. Per case and run, after the product's own sweep
(`specsweep_runs.run_sweep`, same seeds as the search benchmark), from the sweep's own records:

- `loo`: the model's leave-one-out error over the trees it launched, what the policy itself trusts;
- `vs_truth`: the mean relative error of the model fitted on all its launches against the noise-free
  truth, over every tree of the space (measured or not), each at the memory flags of the sweep's best
  launch (the flags the model's step costs were measured with);
- `fitted`: whether the model predicted at all (it needs `MIN_TREES` measured trees).

`python -m benchmarks.search.model_error [--seeds N]` prints one line per case and writes
`benchmarks/out/model_error.json`.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from dataclasses import asdict, dataclass

from benchmarks.harness import paths
from benchmarks.harness.quiet import quiet_optuna
from benchmarks.launches.noisy import Launcher
from benchmarks.search.specsweep import VARIANTS, run_sweep
from benchmarks.truth.cases import BenchCase, case_spec
from benchmarks.truth.oracle import Oracle
from benchmarks.truth.real_derived import real_derived_cases
from orchestrator.config.draft_tree import DraftTree
from orchestrator.driver.answer.noise import Regime
from orchestrator.driver.search.space import space_configs
from orchestrator.driver.speculation.predictions import measured_objectives, stage_samples
from orchestrator.driver.speculation.spec_model import MIN_TREES, fit, loo_error
from orchestrator.spec.search import make_config

OUT = paths.OUT / "model_error.json"
SEED_BASE = 4_200_000  # the real-derived set's run seeds (efficiency.SearchSettings.real_seed_base)
BUDGET = 40  # full launches of the median configuration, as the search benchmark gives


@dataclass(frozen=True)
class RunError:
    case: str
    regime: str
    seed: int
    trees_launched: int
    fitted: bool
    loo: float | None
    vs_truth: float | None


def run_error(case: BenchCase, regime: Regime, seed: int) -> RunError:
    profile = case.load_profile()
    oracle = Oracle(case_spec(case, gpus=profile.gpu_count), profile)
    configs = space_configs(case.space)
    evaluations = [oracle.evaluate(c) for c in configs]
    typical = statistics.median(e.seconds() for e in evaluations if e.objective is not None)
    launcher = Launcher(oracle, seed, budget_gpu_s=BUDGET * typical, max_launches=3 * BUDGET, regime=regime)
    records = run_sweep(VARIANTS["specsweep"], launcher).outcome.records
    samples = stage_samples(records)
    loo = loo_error(samples, measured_objectives(records))  # what the policy itself computes
    trees = sorted({s.tree for s in samples})
    if len(trees) < MIN_TREES:
        return RunError(case.name, regime.value, seed, len(trees), False, loo, None)
    model = fit(samples)
    best = max(
        (r for r in records if r.objective is not None and DraftTree.of(r.result.config)),
        key=lambda r: r.objective or 0.0,
    )
    c = best.result.config
    errors = []
    for tree in sorted({t for t in (DraftTree.of(x) for x in configs) if t is not None}, key=DraftTree.label):
        truth = oracle.evaluate(
            make_config(
                c.mem_fraction_static,
                c.cuda_graph_max_bs,
                c.max_running_requests,
                tree.steps,
                tree.topk,
                tree.draft_tokens,
            )
        ).objective
        if truth:
            errors.append(abs(model.objective(tree) / truth - 1.0))
    return RunError(
        case.name, regime.value, seed, len(trees), True, loo, statistics.fmean(errors) if errors else None
    )


def _fmt(values: list[float | None]) -> str:
    got = [v for v in values if v is not None and math.isfinite(v)]
    return f"{100 * statistics.median(got):5.1f} %" if got else "    -  "


def notes(cases: list[BenchCase], seeds: int) -> list[str]:
    """One note per real-derived case and regime: how wrong the policy's model was, in its own sweeps."""
    out = []
    for case in cases:
        for regime in (Regime.GPU_BOUND, Regime.OVERHEAD_BOUND):
            rs = [run_error(case, regime, SEED_BASE + i) for i in range(seeds)]
            fitted = sum(r.fitted for r in rs)
            trees = statistics.median(r.trees_launched for r in rs)
            loo = _fmt([r.loo for r in rs]).strip().replace("-", "not measured")
            truth = _fmt([r.vs_truth for r in rs]).strip().replace("-", "no fit")
            out.append(
                f"Model error, {case.name} [{regime.value}], {seeds} runs: {trees:.0f} tree(s) launched "
                f"(median), the speculation model fitted in {fitted}; its leave-one-out error (median) "
                f"{loo}, against the truth over the space's trees {truth}."
            )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10)
    args = parser.parse_args()
    quiet_optuna()
    runs = [
        run_error(case, regime, SEED_BASE + i)
        for case in real_derived_cases()
        for regime in (Regime.GPU_BOUND, Regime.OVERHEAD_BOUND)
        for i in range(args.seeds)
    ]
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps([asdict(r) for r in runs], indent=1))
    print(f"{'case':52} {'regime':15} {'trees':>5} {'fitted':>6} {'loo':>8} {'vs truth':>8}")
    for case in dict.fromkeys(r.case for r in runs):
        for regime in (Regime.GPU_BOUND.value, Regime.OVERHEAD_BOUND.value):
            rs = [r for r in runs if r.case == case and r.regime == regime]
            print(
                f"{case:52} {regime:15} {statistics.median(r.trees_launched for r in rs):5.0f} "
                f"{sum(r.fitted for r in rs):3d}/{len(rs):<2d} {_fmt([r.loo for r in rs]):>8} "
                f"{_fmt([r.vs_truth for r in rs]):>8}"
            )


if __name__ == "__main__":
    main()
