"""The progress line counts what the budget counts, the baseline is never `best`, and a resumed study
keeps the budget it was run with (`--trials` changes it, and the run says which one it uses)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from benchmarks.truth.oracle import Oracle
from orchestrator import cli
from orchestrator.driver.console.progress import ProgressPrinter
from orchestrator.driver.console.study_guard import study_budget
from orchestrator.driver.search.space import params_for
from orchestrator.driver.store.study import launched_count, open_study
from orchestrator.driver.store.trial_attrs import StudyAttr
from orchestrator.records import ServerConfig
from tests.driver.console.test_study_guard import DEMO, make_study, storage_url
from tests.driver.loop.test_driver_decisions import InProcessExecutor, _sweep, configs, oracle  # noqa: F401


def test_the_baseline_is_not_counted_and_is_best_only_as_no_speculation(
    oracle: Oracle,  # noqa: F811
    configs: dict[str, ServerConfig],  # noqa: F811
    tmp_path: Path,
) -> None:
    # Seen: `[4/3 done ...] best ... (trial 0)` where trial 0 was the baseline (no speculation).
    from optuna.storages import InMemoryStorage

    spec = oracle.spec.model_copy(update={"budget": oracle.spec.budget.model_copy(update={"baseline": True})})
    study = open_study(spec, "progress", InMemoryStorage(), resume=False)
    sweep = _sweep(spec, study, InProcessExecutor(oracle), n_trials=1, workdir=tmp_path)
    sweep.prepare(resume=False)  # queues the baseline (and the spec's known-good configurations)
    study.enqueue_trial(params_for(configs["no_kv"]))  # the only speculative launch fails
    records = sweep.run().records
    baseline = next(r for r in records if r.baseline)
    assert baseline.result.output_tok_per_s  # it ran, and was the fastest trial
    progress = sweep.outcome.progress
    assert progress.done == launched_count(study) == 1
    # With no speculative launch measured the answer is the server without speculation, and the line
    # says so: never a bare "trial 0" read as a speculative configuration.
    assert progress.best_number == baseline.number and progress.best_name == "trial 0, no speculation"
    line = ProgressPrinter(1, tty=True, write=lambda _: None).live_line(progress)
    assert "[1/1 done" in line and "(trial 0, no speculation)" in line

    resumed = _sweep(
        spec, open_study(spec, "progress", study._storage, resume=True), InProcessExecutor(oracle), 1
    )
    resumed.prepare(resume=True)  # the counts read back from the study agree
    assert resumed.outcome.progress.done == 1 and resumed.outcome.progress.best_number is None


def test_a_resumed_study_keeps_its_own_budget(tmp_path: Path) -> None:
    out = tmp_path / "runs"
    study = make_study(out, finished=1)
    study.set_user_attr(StudyAttr.BUDGET_TRIALS, 1)
    url = storage_url(out)
    assert study_budget(url, "demo", True, None, 12)[0] == 1
    assert study_budget(url, "demo", True, 5, 12) == (5, "--trials")
    assert study_budget(url, "demo", False, None, 12)[0] == 12


def test_plain_resume_of_a_study_run_with_one_trial_has_nothing_to_do(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Seen: a study run with --trials 1, resumed without --trials, went back to the spec's 12 and ran 11.
    out = tmp_path / "runs"
    make_study(out, finished=1).set_user_attr(StudyAttr.BUDGET_TRIALS, 1)
    launched: list[Any] = []
    monkeypatch.setattr(cli, "run", lambda *a, **k: launched.append(a) or 0)
    assert cli.main([str(DEMO), "--out", str(out), "--resume"]) == 0
    assert not launched
    # one trial, not "1 trials" (seen)
    assert "already run 1 trial (budget 1)" in capsys.readouterr().out
    # --trials says otherwise: the run goes ahead with that budget and says where it comes from.
    assert cli.main([str(DEMO), "--out", str(out), "--resume", "--trials", "3"]) == 0
    assert launched and launched[0][2] == 3
    assert "budget: 3 trials (--trials)" in capsys.readouterr().out
    fresh = tmp_path / "fresh"
    make_study(fresh, finished=0)
    assert cli.main([str(DEMO), "--out", str(fresh), "--resume", "--trials", "1"]) == 0
    assert "budget: 1 trial (--trials)" in capsys.readouterr().out
