"""A quick run's stand-in for the final held-out set is labelled as the stand-in it is.

Seen: `make bench` printed `gen13-0 [held-out 2]` and "Pooled, ... held-out 2 cases", while the README
says a quick run never touches held-out 2 (its stand-in is generated from seed 13)."""

from __future__ import annotations

from benchmarks.run import FULL, QUICK
from benchmarks.search.efficiency import CaseSet, case_sets


def test_only_the_final_seed_s_cases_are_called_held_out_2() -> None:
    quick = {s for _, s, _ in case_sets(QUICK.search)}
    assert CaseSet.HELDOUT_2 not in quick and CaseSet.HELDOUT_2_STAND_IN in quick
    full = {s for _, s, _ in case_sets(FULL.search)}
    assert CaseSet.HELDOUT_2 in full and CaseSet.HELDOUT_2_STAND_IN not in full
