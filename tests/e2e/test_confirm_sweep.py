"""Confirmation end to end: the best configuration is launched again through the sweep's own loop."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from e2ehelp import GOOD, sim_cluster

from orchestrator.cli import resolve_profile
from orchestrator.driver.answer.choose import answer_launches, choose_answer
from orchestrator.driver.answer.confirm import rank
from orchestrator.driver.answer.noise import NoiseSource
from orchestrator.driver.dispatch import cluster
from orchestrator.driver.loop.sweep import Sweep
from orchestrator.driver.store.study import open_study
from orchestrator.driver.store.tracking import Tracker
from orchestrator.driver.store.trial_attrs import TrialAttr
from orchestrator.spec.sweep_spec import load_spec


@pytest.mark.slow
def test_the_best_configuration_is_relaunched_until_it_has_its_repeats(
    tmp_path: Path, demo_spec: Any
) -> None:
    spec = load_spec(
        demo_spec(
            budget__trials=4, budget__baseline=False, budget__confirm_top=1, budget__confirm_repeats=3,
            known_good=[GOOD],
        )
    )  # fmt: skip
    with sim_cluster(1) as c:
        cluster.connect(spec, c.address)
        study = open_study(spec, "confirm", f"sqlite:///{tmp_path / 'o.db'}", resume=False)
        tracker = Tracker(f"sqlite:///{tmp_path / 'm.db'}", "confirm", tmp_path / "spool")
        tracker.start("t", {}, {})
        sweep = Sweep(spec, study, tracker, n_trials=4, workdir=tmp_path, sim_profile=resolve_profile(spec))
        sweep.prepare(resume=False)
        assert sweep.reserve_for_confirmation() == 2
        sweep.run()
        searched = [r for r in sweep.outcome.records if r.result.node_id]
        assert len(searched) == 2  # the search leaves the reserve alone
        outcome = sweep.confirm_best()
    launched = [r for r in outcome.records if r.result.node_id]
    assert len(launched) == 4
    confirms = [t for t in study.get_trials() if TrialAttr.CONFIRM_OF in t.user_attrs]
    # Launched again (not answered from the record), the same configuration, marked with its first trial.
    assert len(confirms) == 2 and all("repeat_of" not in t.user_attrs for t in confirms)
    first = confirms[0].user_attrs[TrialAttr.CONFIRM_OF]
    again = [r for r in launched if r.number in {t.number for t in confirms}]
    original = next(r for r in launched if r.number == first)
    assert all(r.result.config == original.result.config for r in again)
    assert all((TrialAttr.CONFIRM_OF, str(first)) in r.extra_tags for r in again)
    # Each launch is a new sample of the launch noise: the figures differ.
    values = [r.objective for r in [original, *again]]
    assert len(set(values)) == 3
    answer = choose_answer(answer_launches(outcome.records))
    # Three launches of one configuration: the verdict uses the node's own measured spread, and says so.
    assert answer is not None and answer.verdict.noise_source is NoiseSource.POOLED
    assert "pooled over 3 launches of 1 configuration(s)" in answer.verdict.statement
    confirmed = next(c for c in rank(outcome.records) if c.config == original.result.config)
    assert confirmed.repeats == 3 and confirmed.numbers == (first, *(r.number for r in again))
