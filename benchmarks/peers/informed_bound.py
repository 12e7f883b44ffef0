"""Not a contestant: a strategy told the best speculative trees in advance, the ceiling that noise and the
budget put on any strategy that still has to tell the top trees apart."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from benchmarks.launches.noisy import Launch, Launcher
from benchmarks.launches.run_record import SearchRun, done
from orchestrator.records import ServerConfig

TOP_TREES = 3  # informed_bound is told this many of the best speculative trees


def _tree(config: ServerConfig) -> tuple[int | None, int | None, int | None]:
    c = config
    return (c.speculative_num_steps, c.speculative_eagle_topk, c.speculative_num_draft_tokens)


def informed_bound(launcher: Launcher, configs: Sequence[ServerConfig]) -> SearchRun:
    """Not a contestant: what the budget allows to a strategy told in advance the `TOP_TREES` best
    speculative trees by true value, each with its best memory flags, whatever their distance from the
    optimum (the best one among them is the optimum itself). It launches them in turn until the budget
    is spent and answers with the best median, so its regret is a ceiling that noise alone puts on a
    strategy that still has to tell the top trees apart."""
    truth = [(launcher.oracle.evaluate(c).objective, c) for c in configs]
    top: list[ServerConfig] = []
    for _, c in sorted(((v, c) for v, c in truth if v is not None), key=lambda vc: -vc[0]):
        if all(_tree(c) != _tree(t) for t in top):
            top.append(c)
        if len(top) == TOP_TREES:
            break

    def best_median(launches: Sequence[Launch]) -> ServerConfig | None:
        values: dict[ServerConfig, list[float]] = {}
        for lc in launches:
            if lc.objective is not None:
                values.setdefault(lc.config, []).append(lc.objective)
        return max(values, key=lambda c: statistics.median(values[c])) if values else None

    launcher.rule = best_median
    while not launcher.exhausted:
        for config in top:
            if not launcher.exhausted:
                launcher.launch(config)
    return done("informed_bound", launcher)
