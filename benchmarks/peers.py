"""The two tuners users of SGLang and vLLM run today, as their own code runs them, mapped onto SGLang's
flags and the benchmark's paid, noisy launches. Each answers by its own rule.

**SGLang `auto_benchmark`** (sgl-project/sglang, `python/sglang/auto_benchmark_lib.py`:
`build_candidates`, `run_stage`, `run_auto_benchmark`, `best_record`), at its default `search.tier: 2` and
`DEFAULT_MAX_CANDIDATES = 8`:

- the base stage: `build_candidates` keeps the first 8 flags of `server.search_space`, each with its first 3
  values, and makes the base flags (SGLang's own defaults: nothing searched is set) followed by the full
  product of the first three flags, then the remaining flags one at a time; duplicates dropped, and the list
  cut at 8 candidates *including* the base. Our space's first three flags are `mem_fraction_static`,
  `cuda_graph_max_bs`, `max_running_requests`; the base stage runs without speculation (the speculative
  flags belong to the `speculative` section). The user lists three values per flag (tier 2 keeps only the
  first three): a typical value first (the space's middle), then its two ends. With three flags of three
  values the product has 27 entries, so the cut keeps the base and the first 7 of the product: all at the
  first fraction listed. (Listed lowest first, every candidate of the tight case runs out of KV memory and
  the tool has no answer; middle first is the kinder reading, and the one used.)
- the speculative stage (`speculative.enabled`): the best base record's flags plus the speculative
  algorithm and draft are the new base, and `build_candidates` runs again over `speculative.search_space`
  (steps, top-k, draft tokens; three values each, the same way), again at most 8. The speculative base
  sets no tree: the usual chain (steps 3, top-k 1, draft tokens 4; the space's nearest) stands for it.
  SGLang adjusts a top-k 1 tree to draft tokens = steps + 1 and runs every other tree as given, so a
  product entry can fall outside the space the other strategies search (it is scored by its own true
  value); two candidates that end up the same server are two launches, as in the tool.
- the answer: `best_record` over every record of both stages (`result_sort_key`: the SLA passed, then the
  request rate, then output throughput): at a fixed rate, the single best throughput measured, so a base
  without speculation can be the answer. A failed candidate (OOM) is recorded and the stage goes on; no
  successful base stops the speculative stage (`ValueError`), and then there is no speculative answer.

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

import itertools
from collections.abc import Sequence

from benchmarks.noise import Launcher
from benchmarks.oracle import Oracle
from benchmarks.search_run import SearchRun, done
from orchestrator.driver.proposal.trees import dim_values
from orchestrator.records import ServerConfig
from orchestrator.sim.args import build_parser, resolve
from orchestrator.spec.search import make_config

MAX_CANDIDATES = 8  # auto_benchmark_lib.DEFAULT_MAX_CANDIDATES
TIER2_VALUES = 3  # tier 2 keeps each flag's first three values
TIER2_HEAD = 3  # ... and makes the full product of the first three flags
USUAL_TREE = (3, 1, 4)  # SGLang's EAGLE-3 tree when none is given: steps 3, top-k 1, draft tokens 4
VLLM_START_UTIL = 0.98  # auto_tune.sh: gpu_memory_utilization=0.98, then - 0.01 while the start fails

Flags = dict[str, float]


def nearest(options: list[float], target: float) -> float:
    return min(options, key=lambda v: (abs(v - target), v))


def sglang_defaults(oracle: Oracle, *, speculative: bool = True) -> tuple[float, int, int]:
    """SGLang's own choices for a launch that sets none of the searched flags, snapped to the space: auto
    `mem_fraction_static`, graph batch by GPU size, and with speculation requests reset to 48 (without it
    SGLang sizes the request pool from the KV pool: the space's largest stands for that)."""
    spec, profile = oracle.spec, oracle.profile
    argv = [
        "--model-path", spec.model.path, "--tp-size", str(oracle.gpus),
        "--sim-profile", profile.name, "--sim-state-dir", "/nonexistent",
    ]  # fmt: skip
    if speculative:
        argv += [
            "--speculative-algorithm", spec.model.speculative_algorithm,
            "--speculative-draft-model-path", spec.model.draft_path,
        ]  # fmt: skip
    args = resolve(build_parser().parse_args(argv), profile, frozenset())
    space = spec.search
    requests = dim_values(space.max_running_requests)
    return (
        nearest(dim_values(space.mem_fraction_static), args.mem_fraction_static),
        int(nearest(dim_values(space.cuda_graph_max_bs), args.cuda_graph_max_bs)),
        int(
            nearest(requests, float(args.max_running_requests)) if args.max_running_requests else requests[-1]
        ),
    )


def _flags(defaults: tuple[float, int, int]) -> Flags:
    mem, gbs, mrr = defaults
    return {"mem_fraction_static": mem, "cuda_graph_max_bs": float(gbs), "max_running_requests": float(mrr)}


def three(options: list[float]) -> list[float]:
    """The three values a tier-2 user lists: a typical one (the middle), then the lowest and the highest
    (fewer when the flag has fewer)."""
    picked = [options[len(options) // 2], options[0], options[-1]]
    return list(dict.fromkeys(picked))


def build_candidates(base: Flags, space: Sequence[tuple[str, list[float]]]) -> list[Flags]:
    """`auto_benchmark_lib.build_candidates` at tier 2 with `max_candidates` 8."""
    items = [(key, vals[:TIER2_VALUES]) for key, vals in space[:8]]
    head, tail = items[:TIER2_HEAD], items[TIER2_HEAD:]
    candidates = [dict(base)]
    for combo in itertools.product(*[vals for _, vals in head]):
        candidates.append(base | {key: value for (key, _), value in zip(head, combo, strict=True)})
    for key, vals in tail:
        candidates += [base | {key: value} for value in vals]
    out: list[Flags] = []
    for candidate in candidates:
        if candidate not in out:
            out.append(candidate)
        if len(out) >= MAX_CANDIDATES:
            break
    return out


def sglang_tree(steps: int, topk: int, draft: int) -> tuple[int, int, int]:
    """The tree SGLang runs for these flags: with top-k 1 it sets draft tokens to steps + 1
    (`sglang.srt.server_args`; `orchestrator.sim.args` follows it); any other tree runs as given."""
    if topk == 1:
        return steps, 1, steps + 1
    return steps, topk, draft


def _tree_space(oracle: Oracle) -> list[tuple[str, list[float]]]:
    s = oracle.spec.search
    return [
        ("speculative_num_steps", three(dim_values(s.speculative_num_steps))),
        ("speculative_eagle_topk", three(dim_values(s.speculative_eagle_topk))),
        ("speculative_num_draft_tokens", three(dim_values(s.speculative_num_draft_tokens))),
    ]


def usual_tree(oracle: Oracle) -> tuple[int, int, int]:
    s = oracle.spec.search
    steps = int(nearest(dim_values(s.speculative_num_steps), USUAL_TREE[0]))
    topk = int(nearest(dim_values(s.speculative_eagle_topk), USUAL_TREE[1]))
    draft = int(nearest(dim_values(s.speculative_num_draft_tokens), USUAL_TREE[2]))
    return sglang_tree(steps, topk, draft)


def auto_benchmark(launcher: Launcher, configs: Sequence[ServerConfig]) -> SearchRun:
    oracle = launcher.oracle
    s = oracle.spec.search
    plain = _flags(sglang_defaults(oracle, speculative=False))
    server_space = [
        ("mem_fraction_static", three(dim_values(s.mem_fraction_static))),
        ("cuda_graph_max_bs", three(dim_values(s.cuda_graph_max_bs))),
        ("max_running_requests", three(dim_values(s.max_running_requests))),
    ]
    # The base flags set nothing searched: SGLang's defaults fill in what a candidate leaves unset (all of
    # it for the first, empty candidate), and the best base's *flags* carry on to the speculative stage,
    # where SGLang's speculative defaults fill them in again.
    best: tuple[float, Flags] | None = None
    for flags in build_candidates({}, server_space):
        if launcher.exhausted:
            return done("auto_benchmark", launcher)
        f = plain | flags
        lc = launcher.launch(
            make_config(f["mem_fraction_static"], int(f["cuda_graph_max_bs"]), int(f["max_running_requests"]))
        )
        if lc.objective is not None and (best is None or lc.objective > best[0]):
            best = (lc.objective, flags)
    if best is None:
        return done("auto_benchmark", launcher)  # "Speculative search requires at least one successful base"
    base = _flags(sglang_defaults(oracle)) | best[1]
    steps, topk, draft = usual_tree(oracle)
    spec_base = {"speculative_num_steps": float(steps), "speculative_eagle_topk": float(topk),
                 "speculative_num_draft_tokens": float(draft)}  # fmt: skip
    for flags in build_candidates({}, _tree_space(oracle)):
        if launcher.exhausted:
            break
        t = spec_base | flags
        tree = sglang_tree(
            int(t["speculative_num_steps"]),
            int(t["speculative_eagle_topk"]),
            int(t["speculative_num_draft_tokens"]),
        )
        launcher.launch(
            make_config(
                base["mem_fraction_static"],
                int(base["cuda_graph_max_bs"]),
                int(base["max_running_requests"]),
                *tree,
            )
        )
    return done("auto_benchmark", launcher)


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
