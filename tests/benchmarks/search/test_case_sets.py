"""A quick run's stand-in for the final held-out set is labelled as the stand-in it is.

Seen: `make bench` printed `gen13-0 [held-out 2]` and "Pooled, ... held-out 2 cases", while the README
says a quick run never touches held-out 2 (its stand-in is generated from seed 13)."""

from __future__ import annotations

from dataclasses import replace

from benchmarks.run import FULL, QUICK
from benchmarks.search.efficiency import CaseSet, SearchSettings, case_sets


def final_sets(settings: SearchSettings) -> set[CaseSet]:
    """The sets of the run's final held-out cases alone (the other sets' cases take long to generate)."""
    only = replace(settings, cases=(), dev_generated=0, heldout_cases=0, final_cases=1, real_cases=0)
    return {s for _, s, _ in case_sets(only)}


def test_only_the_final_seed_s_cases_are_called_held_out_2() -> None:
    assert final_sets(QUICK.search) == {CaseSet.HELDOUT_2_STAND_IN}
    assert final_sets(FULL.search) == {CaseSet.HELDOUT_2}
