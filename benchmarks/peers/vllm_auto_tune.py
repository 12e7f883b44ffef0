"""vLLM's own tuner as its code runs it, mapped onto SGLang's flags and the benchmark's paid, noisy
launches; it answers by its own rule.

**vLLM `auto_tune.sh`** (vllm-project/vllm, `benchmarks/auto_tune/auto_tune.sh`):

- first the memory: `gpu_memory_utilization=0.98`, start a server with the last (largest) entries of
  `NUM_SEQS_LIST` and `NUM_BATCHED_TOKENS_LIST`, and step down by 0.01 while it fails to start (giving up
  below 0.9). Mapped: `gpu_memory_utilization` -> `mem_fraction_static`, stepped down through the space's
  fractions from the highest at or under 0.98 (a 0.01 step that lands on no new grid point launches
  nothing new), down to the space's lowest fraction instead of 0.9 (SGLang's usable fractions run lower).
  Those start-ups are paid and measure nothing.
- then `run_benchmark` for every pair of `NUM_SEQS_LIST` x `NUM_BATCHED_TOKENS_LIST` at that fraction, each
  a fresh server (the probe's size is started again). Mapped: `max_num_seqs` -> `max_running_requests`,
  `max_num_batched_tokens` -> `cuda_graph_max_bs` (the space's batch-size flag), each over the space's
  values. It tunes no speculation: the tree is fixed at SGLang's usual EAGLE-3 tree (steps 3, top-k 1,
  draft tokens 4), the space's nearest.
- the answer: the pair with the best throughput (`best_throughput`), one draw each.
"""

from __future__ import annotations

from collections.abc import Sequence

from benchmarks.launches.noisy import Launcher
from benchmarks.launches.run_record import SearchRun, done
from benchmarks.peers.sglang_defaults import usual_tree
from orchestrator.driver.proposal.trees import dim_values
from orchestrator.records import ServerConfig
from orchestrator.spec.search import make_config

VLLM_START_UTIL = 0.98  # auto_tune.sh: gpu_memory_utilization=0.98, then - 0.01 while the start fails


def vllm_auto_tune(launcher: Launcher, configs: Sequence[ServerConfig]) -> SearchRun:
    oracle = launcher.oracle
    s = oracle.spec.search
    seqs = [int(v) for v in dim_values(s.max_running_requests)]  # NUM_SEQS_LIST
    batched = [int(v) for v in dim_values(s.cuda_graph_max_bs)]  # NUM_BATCHED_TOKENS_LIST
    tree = usual_tree(oracle)
    fractions = [f for f in sorted(dim_values(s.mem_fraction_static), reverse=True) if f <= VLLM_START_UTIL]
    chosen: float | None = None
    for mem in fractions:
        if launcher.exhausted:
            return done("vllm_auto_tune", launcher)
        ev = launcher.measure(make_config(mem, batched[-1], seqs[-1], *tree))
        started = ev.failure is None or not ev.status.infeasible or ev.failure.stage.value == "under_load"
        # start_server only waits for /health: the start-up is paid, nothing is benchmarked
        launcher.pay(ev, stages_run=0, objective=None)
        if started:
            chosen = mem
            break
    if chosen is None:
        return done("vllm_auto_tune", launcher)  # "Cannot find a proper gpu_memory_utilization"
    for num_seqs in seqs:
        for num_batched in batched:
            if launcher.exhausted:
                return done("vllm_auto_tune", launcher)
            launcher.launch(make_config(chosen, num_batched, num_seqs, *tree))
    return done("vllm_auto_tune", launcher)
