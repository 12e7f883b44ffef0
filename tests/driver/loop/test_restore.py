"""--resume rebuilds the finished trials' results from the journal; the study keeps the search state."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna
from optuna.storages import InMemoryStorage

from benchmarks.truth.oracle import Oracle
from orchestrator.driver.loop.restore import restore
from orchestrator.driver.search.space import params_for
from orchestrator.driver.store.journal import Journal
from orchestrator.driver.store.study import open_study
from orchestrator.driver.store.trial_attrs import TrialAttr
from orchestrator.records import ServerConfig, TrialStatus
from tests.driver.loop.test_driver_decisions import InProcessExecutor, _sweep, configs, oracle  # noqa: F401


def _copy_with_attrs(study: optuna.Study, storage: InMemoryStorage, name: str, attrs: Any) -> optuna.Study:
    """The study's finished trials under ``name``, each with its user attributes as ``attrs`` makes them
    (a finished trial's attributes cannot be changed in place)."""
    copy = optuna.create_study(storage=storage, study_name=name, directions=study.directions)
    for key, value in study.user_attrs.items():
        copy.set_user_attr(key, value)
    for t in study.get_trials():
        copy.add_trial(
            optuna.trial.create_trial(
                state=t.state,
                value=t.value,
                params=t.params,
                distributions=t.distributions,
                user_attrs=attrs(t),
                system_attrs=t.system_attrs,
                intermediate_values=t.intermediate_values,
            )
        )
    return copy


def _first_sweep(oracle: Oracle, configs: dict[str, ServerConfig], tmp_path: Path) -> Any:  # noqa: F811
    spec, storage = oracle.spec, InMemoryStorage()
    study = open_study(spec, "journal", storage, resume=False)
    for name in ("no_kv", "good"):  # no_kv first: launched, it teaches the model its floor
        study.enqueue_trial(params_for(configs[name]))
    first = _sweep(spec, study, InProcessExecutor(oracle), n_trials=2, workdir=tmp_path)
    first.prepare(resume=False)
    first.run()
    assert first.measured and first.memory_model.ready
    return first, study, storage


def test_a_resume_takes_each_trials_result_from_its_journal_record_not_the_studys_attributes(
    oracle: Oracle,  # noqa: F811
    configs: dict[str, ServerConfig],  # noqa: F811
    tmp_path: Path,
) -> None:
    first, study, storage = _first_sweep(oracle, configs, tmp_path)

    def corrupted(t: optuna.trial.FrozenTrial) -> dict[str, Any]:
        # The attributes a lossy store or an older writer may leave: no memory account, a wrong status.
        attrs = {k: v for k, v in t.user_attrs.items() if k != TrialAttr.MEMORY}
        return {**attrs, TrialAttr.STATUS: TrialStatus.FAILED.value, TrialAttr.OUTPUT_TOK_PER_S: 1.0}

    copy = _copy_with_attrs(study, storage, "journal-corrupted", corrupted)
    restored = restore(copy, Journal(tmp_path / "records"))
    assert [r.number for r in restored.records] == [0, 1] == restored.numbers
    assert restored.measured == first.measured  # the journal's statuses and objectives
    assert restored.progress.failed == 0 and restored.progress.pruned_oom == 1
    assert [n for n, _ in restored.memory] == [0, 1]  # the journal's memory accounts

    resumed = _sweep(oracle.spec, copy, InProcessExecutor(oracle), n_trials=3, workdir=tmp_path)
    resumed.prepare(resume=True)
    assert resumed.measured == first.measured and resumed.journal_complete
    assert resumed.memory_model.kv_floor == first.memory_model.kv_floor > 0
    assert resumed.memory_model.predict(configs["lower"]).skip


def test_a_study_without_its_journal_resumes_from_its_attributes(
    oracle: Oracle,  # noqa: F811
    configs: dict[str, ServerConfig],  # noqa: F811
    tmp_path: Path,
) -> None:
    # A study written before the journal (or whose folder was lost): its attributes are all there is.
    first, study, _ = _first_sweep(oracle, configs, tmp_path / "first")
    restored = restore(study, Journal(tmp_path / "elsewhere"))
    assert restored.records == [] and restored.numbers == [0, 1]
    assert restored.measured == first.measured
    assert restored.progress.done == 2 and restored.progress.pruned_oom == 1
    assert [n for n, _ in restored.memory] == [0, 1]
