"""Which searched values matter for tok/s: fANOVA importances over the study's completed trials.

Optuna's own `get_param_importances` keeps only the values every trial shares with one identical
distribution, and here they differ by design: the baseline has no speculative values, top-k 1
derives the draft tokens, and the draft tokens' range depends on steps and top-k. So the importances
are computed over a shadow study of the speculative trials, each value under one widened distribution.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)
from optuna.trial import TrialState

from orchestrator.config.fields import SearchedField
from orchestrator.report.data import sqlite_missing
from orchestrator.report.plots import LABELS
from orchestrator.spec.search import SEARCHED_PARAMS

MIN_TRIALS_FOR_IMPORTANCE = 3
# Set by the proposal policy, not searched: the structure rule launches each tree at the highest fraction
# the memory model says fits for it (`driver.proposal.structure`), so the fraction follows the tree, and
# fANOVA would credit it with what the tree does.
SET_PER_TREE = ("mem_fraction_static",)


@dataclass(frozen=True)
class Importances:
    values: tuple[tuple[str, float], ...]  # most important first; empty when none could be computed
    note: str


def _union(dists: Sequence[BaseDistribution], values: Sequence[Any]) -> BaseDistribution:
    """One distribution that holds every trial's: the ranges of speculative values depend on other
    values (draft tokens on steps and top-k), which Optuna's own importance code refuses."""
    floats = [d for d in dists if isinstance(d, FloatDistribution)]
    if len(floats) == len(dists):
        lows = [d.low for d in floats] + [float(v) for v in values]
        highs = [d.high for d in floats] + [float(v) for v in values]
        return FloatDistribution(min(lows), max(highs))
    ints = [d for d in dists if isinstance(d, IntDistribution)]
    if len(ints) == len(dists):
        int_lows = [d.low for d in ints] + [int(v) for v in values]
        int_highs = [d.high for d in ints] + [int(v) for v in values]
        return IntDistribution(min(int_lows), max(int_highs))
    choices: list[Any] = []
    for d in dists:
        for c in d.choices if isinstance(d, CategoricalDistribution) else ():
            if c not in choices:
                choices.append(c)
    choices.extend(v for v in dict.fromkeys(values) if v not in choices)
    return CategoricalDistribution(choices)


def importances_of(trials: Sequence[optuna.trial.FrozenTrial]) -> Importances:
    """fANOVA importances of the searched values for tok/s over the completed speculative trials."""
    done = [
        t for t in trials if t.state == TrialState.COMPLETE and t.value is not None and math.isfinite(t.value)
    ]
    spec = [t for t in done if "speculative_num_steps" in t.params]
    if len(spec) < MIN_TRIALS_FOR_IMPORTANCE:
        return Importances(
            (),
            f"Parameter importances need at least {MIN_TRIALS_FOR_IMPORTANCE} completed speculative "
            f"trials; this study has {len(spec)}.",
        )
    params: list[dict[str, Any]] = []
    for t in spec:
        p = dict(t.params)
        if p.get("speculative_eagle_topk") == 1 and "speculative_num_draft_tokens" not in p:
            p["speculative_num_draft_tokens"] = int(p["speculative_num_steps"]) + 1  # derived by SGLang
        params.append(p)
    # the engine's own values are params of their own names, beside SGLang's searched ones
    own = sorted({n for p in params for n in p} - {f.value for f in SearchedField})
    present = [n for n in (*SEARCHED_PARAMS, *own) if all(n in p for p in params)]
    # A value the trials all share explains nothing: ranked, it showed as a zero bar among the searched
    # (the real pair's grid fixed its memory flags and varied the tree). Said apart, with its value.
    held = {n: params[0][n] for n in present if len({p[n] for p in params}) == 1}
    names = [n for n in present if n not in SET_PER_TREE and n not in held]
    if not names:
        return Importances((), "Parameter importances need completed trials with different values.")
    dists = {
        n: _union([t.distributions[n] for t in spec if n in t.distributions], [p[n] for p in params])
        for n in names
    }
    shadow = optuna.create_study(direction="maximize")
    for t, p in zip(spec, params, strict=True):
        shadow.add_trial(
            optuna.trial.create_trial(params={n: p[n] for n in names}, distributions=dists, value=t.value)
        )
    try:
        evaluator = optuna.importance.FanovaImportanceEvaluator(seed=0)
        result = optuna.importance.get_param_importances(shadow, evaluator=evaluator)
    except (RuntimeError, ValueError) as err:
        return Importances((), f"Parameter importances could not be computed: {err}")
    left = "" if len(spec) == len(done) else " The no-speculation baseline is left out."
    ranked = ", ".join(LABELS.get(n, n) for n in result)
    note = (
        f"fANOVA over {len(spec)} completed speculative trials: the share of the variance in the "
        f"objective (tok/s) each searched value explains. Ranked: {ranked}."
    )
    per_tree = [n for n in SET_PER_TREE if n in present and n not in held]
    if per_tree:
        note += (
            f" Left out: {', '.join(per_tree)}, set by the memory model for each tree (the highest fraction "
            "it says fits), not searched: it follows the tree, and would be credited with what the tree does."
        )
    if held:
        values = ", ".join(f"{LABELS.get(n, n)} {_text(v)}" for n, v in held.items())
        note += f" Held at one value in these trials, so explaining nothing: {values}."
    note += left
    return Importances(tuple(result.items()), note)


def _text(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def study_importances(study_name: str, storage: str) -> Importances:
    if sqlite_missing(storage):
        return Importances((), f"No Optuna storage at {storage}.")
    try:
        study = optuna.load_study(study_name=study_name, storage=storage)
    except KeyError:
        return Importances((), f"No Optuna study named {study_name!r} in the storage.")
    return importances_of(study.get_trials(deepcopy=False))
