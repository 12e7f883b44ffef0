"""The peers: every strategy specsweep is scored against, by the name its rows carry, in one registry.

Each spends noisy, paid launches (`benchmarks.launches.noisy.Launcher`) the way its tool would, and
answers by its own rule on its own measurements. Every strategy starts from nothing (no known-good
configuration, no baseline) and runs until its GPU-hour budget is spent (or, for a tool with a fixed
plan, until the plan is done). A launch of a configuration already launched is a new launch, paid in full
and drawn anew. Unless said otherwise a strategy recommends the configuration of its best single
measurement.

- `grid`: every configuration of the discretised space once, in the spec's dimension order (no budget);
  `random`: uniform over the grid, no configuration twice (`peers.baselines`).
- `auto_benchmark`, `vllm_auto_tune`: SGLang's and vLLM's own tuners (`peers.auto_benchmark`,
  `peers.vllm_auto_tune`, which cite the files they follow and say how their flags map onto SGLang's).
- `plain_tpe`: Optuna's default TPE on the same `suggest_config`, OOMs told as FAIL (which TPE ignores);
  it launches whatever it proposes, repeats included, and answers with Optuna's `best_trial`.
- `gp`: Optuna's `GPSampler` with the OOM constraint (`constraints_func`); needs PyTorch, and is left out
  with a note when PyTorch is not installed (`peers.optuna_samplers`).
- `informed_bound` (not a contestant, in `BOUNDS`): told the top K speculative trees by true value
  (`peers.informed_bound`).
- specsweep and its variants are not peers: `benchmarks.search.specsweep`.
"""

from __future__ import annotations

import importlib.util

from benchmarks.launches.run_record import Strategy
from benchmarks.peers.auto_benchmark import auto_benchmark
from benchmarks.peers.baselines import grid, random_search
from benchmarks.peers.informed_bound import informed_bound
from benchmarks.peers.optuna_samplers import gp, plain_tpe
from benchmarks.peers.vllm_auto_tune import vllm_auto_tune

HAS_TORCH = importlib.util.find_spec("torch") is not None

# The order is the table's: the reference grid, the two tools, then the generic searches.
PEERS: dict[str, Strategy] = {
    "grid": grid,
    "auto_benchmark": auto_benchmark,
    "vllm_auto_tune": vllm_auto_tune,
    "random": random_search,
    "plain_tpe": plain_tpe,
    **({"gp": gp} if HAS_TORCH else {}),
}
# References that are not contestants: the ceiling that noise and the budget put on any strategy.
BOUNDS: dict[str, Strategy] = {"informed_bound": informed_bound}
