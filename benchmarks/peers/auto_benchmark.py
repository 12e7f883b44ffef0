"""SGLang's own tuner as its code runs it, mapped onto the benchmark's paid, noisy launches; it answers
by its own rule (vLLM's is `peers.vllm_auto_tune`).

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
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from benchmarks.launches.noisy import Launcher
from benchmarks.launches.run_record import SearchRun, done
from benchmarks.peers.sglang_defaults import sglang_defaults, sglang_tree, usual_tree
from benchmarks.truth.oracle import Oracle
from orchestrator.driver.proposal.trees import dim_values
from orchestrator.records import ServerConfig
from orchestrator.spec.search import make_config

MAX_CANDIDATES = 8  # auto_benchmark_lib.DEFAULT_MAX_CANDIDATES
TIER2_VALUES = 3  # tier 2 keeps each flag's first three values
TIER2_HEAD = 3  # ... and makes the full product of the first three flags

Flags = dict[str, float]


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


def _tree_space(oracle: Oracle) -> list[tuple[str, list[float]]]:
    s = oracle.spec.search
    return [
        ("speculative_num_steps", three(dim_values(s.speculative_num_steps))),
        ("speculative_eagle_topk", three(dim_values(s.speculative_eagle_topk))),
        ("speculative_num_draft_tokens", three(dim_values(s.speculative_num_draft_tokens))),
    ]


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
