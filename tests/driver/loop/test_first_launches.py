"""What a new study launches first: the baseline and the known-good entries, with the memory flags they
would be served with (the Qwen3-32B shape on one H200, the memory prior from its config.json)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import optuna
import yaml

from orchestrator.config.fields import SearchedField as F
from orchestrator.driver.loop.node_memory import memory_model_for
from orchestrator.driver.loop.restore import baseline_params, enqueue_first
from orchestrator.driver.memory.prior_model import PriorMemoryModel
from orchestrator.driver.proposal.structure import choose_structure, config_for
from orchestrator.driver.proposal.trees import dim_values
from orchestrator.driver.search.space import suggest_config
from orchestrator.driver.store.trial_attrs import TrialAttr
from orchestrator.spec.sweep_spec import SweepSpec, parse_spec

TRIALS = Path(__file__).resolve().parents[3] / "trials"


def _spec_32b(**changes: Any) -> SweepSpec:
    data = yaml.safe_load((TRIALS / "h200-32b.yaml").read_text())
    data["model"]["path"] = str(TRIALS / "models" / "qwen3-32b-shape")
    data["model"]["draft_path"] = str(TRIALS / "models" / "qwen3-32b-eagle3-shape")
    for key, value in changes.items():
        data[key] = value
    return parse_spec(data)


def _model(spec: SweepSpec) -> PriorMemoryModel:
    model, warnings = memory_model_for(spec, None)
    assert not warnings
    return model


def test_the_baseline_is_launched_at_the_highest_fraction_the_prior_does_not_rule_out() -> None:
    spec = _spec_32b()
    model = _model(spec)
    structure = choose_structure(spec.search, spec.workload.concurrency)
    fraction = baseline_params(spec, model)[F.MEM_FRACTION_STATIC]
    assert not model.predict(config_for(structure, None, fraction)).skip
    above = [f for f in structure.fractions if f > fraction + 1e-9]
    assert above, "the top of the range is ruled out on this shape: the test needs that boundary"
    assert all(model.predict(config_for(structure, None, f)).skip for f in above)
    # Its serving ceiling (the prior's start-up and the serving peak at concurrency 32), not the middle.
    ceiling = model.serving_ceiling(config_for(structure, None, fraction))
    assert ceiling is not None and fraction <= ceiling < fraction + 0.01 + 1e-9


def test_without_the_prior_the_baseline_stays_in_the_middle() -> None:
    spec = _spec_32b(memory={"prior": False, "gpu_memory_mib": 143771})
    fractions = dim_values(spec.search.mem_fraction_static, integer=False)
    fraction = baseline_params(spec, _model(spec))[F.MEM_FRACTION_STATIC]
    assert abs(fraction - fractions[(len(fractions) - 1) // 2]) < 1e-9


def _known(fraction: float) -> dict[str, Any]:
    return {
        "mem_fraction_static": fraction,
        "cuda_graph_max_bs": 32,
        "max_running_requests": 32,
        "speculative_num_steps": 4,
        "speculative_eagle_topk": 4,
        "speculative_num_draft_tokens": 8,
    }


def test_a_known_good_entry_the_prior_rules_out_is_launched_at_its_serving_ceiling() -> None:
    spec = _spec_32b(known_good=[_known(0.98), _known(0.80)])
    model = _model(spec)
    high, low = (k.to_config() for k in spec.known_good)
    assert model.predict(high).skip  # out of memory under load at 0.98, the prior says

    study = optuna.create_study()
    enqueue_first(study, spec, model)
    launched = []
    for _ in range(3):
        trial = study.ask()
        launched.append((suggest_config(trial, spec.search), dict(trial.user_attrs)))
    (_, baseline_attrs), (moved, moved_attrs), (kept, kept_attrs) = launched
    assert baseline_attrs.get(TrialAttr.BASELINE)

    # The same tree and flags, at the highest searched fraction below 0.98 that is not ruled out.
    assert moved.mem_fraction_static < 0.98
    assert moved == replace(high, mem_fraction_static=moved.mem_fraction_static)
    assert not model.predict(moved).skip
    above = [f for f in dim_values(spec.search.mem_fraction_static) if moved.mem_fraction_static < f < 0.98]
    for f in above:
        assert model.predict(replace(high, mem_fraction_static=f)).skip
    assert moved_attrs[TrialAttr.KNOWN_GOOD] and moved_attrs[TrialAttr.KNOWN_GOOD_FRACTION] == 0.98

    # One the prior does not rule out is launched as written.
    assert kept == low and TrialAttr.KNOWN_GOOD_FRACTION not in kept_attrs
