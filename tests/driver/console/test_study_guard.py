"""A study is never lost or mixed: a second run, a typo'd resume, two drivers, a finished study.

Each check runs the real CLI entry (`orchestrator.cli.main`) in-process; every refusal happens before
Ray, MLflow or a trial folder, so these take a second each.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.storages import RDBStorage
from optuna.trial import TrialState

from orchestrator import cli
from orchestrator.driver.answer.best_file import BestFile
from orchestrator.driver.answer.choose import Call, Verdict
from orchestrator.driver.answer.noise import NoiseSource, Regime
from orchestrator.driver.store.study import launched_count, open_study, tell_outcome
from orchestrator.driver.store.study_lock import (
    DriverLease,
    StudyInUse,
    close_dead_drivers_trials,
    requeue_closed,
)
from orchestrator.driver.store.trial_attrs import StudyAttr, TrialAttr
from orchestrator.records import TrialStatus
from orchestrator.spec.search import make_config
from orchestrator.spec.sweep_spec import load_spec

ROOT = Path(__file__).resolve().parents[3]
DEMO = ROOT / "trials" / "demo.yaml"


def storage_url(out: Path) -> str:
    return f"sqlite:///{out / 'optuna.db'}"


def make_study(out: Path, finished: int, name: str = "demo") -> optuna.Study:
    """A study as a first run leaves it: `finished` measured trials."""
    out.mkdir(parents=True, exist_ok=True)
    spec = load_spec(DEMO)
    study = open_study(spec, name, storage_url(out), resume=False)
    for i in range(finished):
        trial = study.ask()
        trial.suggest_float("mem_fraction_static", 0.80 + i / 100, 0.80 + i / 100)
        trial.set_user_attr("status", TrialStatus.OK.value)
        tell_outcome(study, trial, TrialStatus.OK, 1000.0 + i, pruned=False)
    (out / name).mkdir(exist_ok=True)
    (out / name / "summary.json").write_text('{"trials_recorded": 3}')
    return study


def main(out: Path, *args: str) -> int:
    return cli.main([str(DEMO), "--out", str(out), "--no-dashboard", *args])


def test_second_run_under_a_taken_name_is_refused_and_changes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "runs"
    make_study(out, finished=2)
    db_before = (out / "optuna.db").read_bytes()
    assert main(out) == 2
    err = capsys.readouterr().err
    assert "--resume" in err and "--study" in err and "already exists" in err
    # The old study is all there: never deleted, never appended to.
    study = optuna.load_study(study_name="demo", storage=storage_url(out))
    assert len(study.trials) == 2
    assert (out / "optuna.db").read_bytes() == db_before
    assert (out / "demo" / "summary.json").read_text() == '{"trials_recorded": 3}'


def test_a_refusal_counts_trials_as_the_resume_does_and_names_what_runs_more(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Seen: "a study named 'tofile' already exists ... (13 trials) ... Either continue it: ...--resume",
    and that command printed "has already run 12 trials (budget 12): nothing to do": the refusal counted
    the baseline, and sent a finished study's user to a command that does nothing."""
    out = tmp_path / "runs"
    make_study(out, finished=2, name="part")
    assert main(out, "--study", "part") == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "(2 of its 12 trials run, the baseline aside)" in err and "continue it with --resume" in err
    make_study(out, finished=12, name="whole")
    assert main(out, "--study", "whole") == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "(12 of its 12 trials run, the baseline aside: finished)" in err, err
    command = err.split("run more trials in it: ")[1].split(", or start")[0]
    assert shlex.split(command)[-3:] == ["--resume", "--trials", "24"], command


def test_a_taken_name_under_make_names_the_make_commands(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Seen: a second `make sweep` was told "continue it with --resume", a flag make does not take.
    out = tmp_path / "runs"
    make_study(out, finished=2)
    monkeypatch.setenv("MAKELEVEL", "1")
    assert main(out) == 2
    err = capsys.readouterr().err
    resume = err.split("Either continue it: ", 1)[1].split(", or start a new one: ")[0]
    assert resume.startswith("make sweep ARGS="), err
    assert shlex.split(resume)[2].split()[-1] == "--resume" and "--study demo" in resume, err
    new = err.split("or start a new one: ", 1)[1].strip()
    assert new.startswith("make sweep ARGS=") and "--study NEW_NAME" in shlex.split(new)[2], err
    assert "--resume" not in new, err


def test_a_taken_name_outside_make_keeps_the_flags(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "runs"
    make_study(out, finished=2)
    assert main(out) == 2
    err = capsys.readouterr().err
    assert "Either continue it with --resume, or start a new one with --study NEW_NAME" in err
    assert "make " not in err


def test_resume_of_a_study_that_does_not_exist_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(tmp_path / "runs", "--resume") == 2
    assert "no study 'demo'" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


def test_new_study_in_a_folder_left_by_another_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "runs" / "demo" / "trials" / "0000").mkdir(parents=True)
    assert main(tmp_path / "runs") == 2
    assert "already holds the files" in capsys.readouterr().err


def test_resume_of_a_finished_study_changes_nothing_and_reprints_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "runs"
    make_study(out, finished=3)
    verdict = Verdict(
        call=Call.ALONE,
        statement="trial 2: 1002.0 tok/s; no other speculative configuration completed",
        noise_source=NoiseSource.PRIOR,
        regime=Regime.OVERHEAD_BOUND,
        launch_sd=0.11,
    )
    best = BestFile(
        config_label="mf0.820 gbs64 mrr16 s2k1d3",
        config=BestFile.config_fields(make_config(0.82, 64, 16, 2, 1, None)),
        launches=[2],
        launch_tok_per_s=[1002.0],
        median_tok_per_s=1002.0,
        trial=2,
        verdict=verdict,
    )
    best.write(out / "demo")
    db_before = (out / "optuna.db").read_bytes()
    assert main(out, "--resume", "--trials", "3") == 0
    said = capsys.readouterr().out
    assert "nothing to do" in said and "trial 2, 1002.0 tok/s, mf0.820 gbs64 mrr16 s2k1d3" in said
    assert "confidence: trial 2: 1002.0 tok/s; no other speculative configuration completed" in said
    assert (out / "optuna.db").read_bytes() == db_before
    assert (out / "demo" / "summary.json").read_text() == '{"trials_recorded": 3}'
    assert not (out / "mlflow.db").exists()  # no new MLflow run for a sweep that did nothing


def test_a_second_driver_on_a_live_study_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "runs"
    study = make_study(out, finished=1)
    lease = DriverLease(study)
    lease.acquire()  # the first driver, alive in this process
    running = study.ask()
    lease.track(running._trial_id)
    try:
        assert main(out, "--resume", "--trials", "5") == 2
        assert "another driver" in capsys.readouterr().err
        # Its running trial was not touched.
        assert study._storage.get_trial(running._trial_id).state == TrialState.RUNNING
        with pytest.raises(StudyInUse):
            close_dead_drivers_trials(optuna.load_study(study_name="demo", storage=storage_url(out)))
    finally:
        lease.release()
    assert study.user_attrs[StudyAttr.DRIVER] is None


def _dead_drivers_trial(out: Path, attrs: dict[str, Any] | None = None) -> tuple[optuna.Study, int]:
    """A study whose driver died (its stamp names a process that is gone) with one trial running, asked
    with ``attrs`` (as the confirmation queues its launches); closed as the next driver closes it."""
    study = make_study(out, finished=1)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    lease = DriverLease(study)
    lease.acquire()
    if attrs is not None:
        study.enqueue_trial({"mem_fraction_static": 0.85}, user_attrs=attrs)
    orphan = study.ask({"mem_fraction_static": optuna.distributions.FloatDistribution(0.8, 0.9)})
    lease.track(orphan._trial_id)
    lease._stop.set()  # the driver dies without releasing: its stamp now names a process that is gone
    study.set_user_attr(StudyAttr.DRIVER, dict(study.user_attrs[StudyAttr.DRIVER], pid=dead.pid))
    closed = close_dead_drivers_trials(optuna.load_study(study_name="demo", storage=storage_url(out)))
    assert closed == [orphan.number]
    return optuna.load_study(study_name="demo", storage=storage_url(out)), orphan.number


def test_a_dead_drivers_running_trial_is_closed_and_requeued(tmp_path: Path) -> None:
    out = tmp_path / "runs"
    after, orphan = _dead_drivers_trial(out)
    assert after.trials[orphan].state == TrialState.FAIL
    assert str(orphan) in after.user_attrs[StudyAttr.CLOSED_TRIALS]
    waiting = [t for t in after.trials if t.state == TrialState.WAITING]
    assert [t.user_attrs["requeued_from"] for t in waiting] == [orphan]
    assert waiting[0].system_attrs["fixed_params"] == after.trials[orphan].params
    assert launched_count(after) == 1  # the closed trial does not use up the budget


def test_a_dead_drivers_confirmation_launch_is_queued_again_as_one(tmp_path: Path) -> None:
    """The demo killed during its confirmation: the launch queued again had lost its `confirm_of`, so it
    could be cut by the pruner like a search launch (a confirmation launch never is), its MLflow run was
    not tagged as the confirmation's, and a later resume counted it among the search's launches."""
    after, orphan = _dead_drivers_trial(tmp_path / "runs", {TrialAttr.CONFIRM_OF: 0})
    (waiting,) = [t for t in after.trials if t.state == TrialState.WAITING]
    assert waiting.user_attrs[TrialAttr.REQUEUED_FROM] == orphan
    assert waiting.user_attrs[TrialAttr.CONFIRM_OF] == 0


@pytest.mark.slow  # seconds of real time (a simulated server, a sweep or a wait); left out of `make unit`
def test_optunas_heartbeat_closes_only_the_trial_whose_heartbeat_stopped(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'o.db'}"
    storage = RDBStorage(
        url, heartbeat_interval=1, grace_period=1, heartbeat_stale_trial_callback=requeue_closed
    )
    study = optuna.create_study(study_name="hb", storage=storage)
    dist: dict[str, Any] = {"x": optuna.distributions.FloatDistribution(0, 1)}
    silent = study.ask(dist)
    beating = study.ask(dist)
    storage.record_heartbeat(silent._trial_id)
    storage.record_heartbeat(beating._trial_id)
    deadline = time.monotonic() + 2.5
    while time.monotonic() < deadline:  # only one of the two keeps beating
        storage.record_heartbeat(beating._trial_id)
        time.sleep(0.3)
    stale_ids = storage._get_stale_trial_ids(study._study_id)
    assert stale_ids == [silent._trial_id]
    with pytest.warns(optuna.exceptions.ExperimentalWarning):
        optuna.storages.fail_stale_trials(study)
    assert storage.get_trial(silent._trial_id).state == TrialState.FAIL
    assert storage.get_trial(beating._trial_id).state == TrialState.RUNNING
    assert study.user_attrs[StudyAttr.CLOSED_TRIALS] == {
        str(silent.number): "stale: its driver's heartbeat stopped"
    }


@pytest.mark.slow  # seconds of real time (a simulated server, a sweep or a wait); left out of `make unit`
def test_the_lease_beats_for_its_tracked_trials_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Through `DriverLease` itself: the trial it tracks keeps a heartbeat; the one it let go of falls
    silent and Optuna takes it for stale."""
    from orchestrator.driver.store import study_lock

    monkeypatch.setattr(study_lock, "HEARTBEAT_S", 0.3)
    storage = RDBStorage(f"sqlite:///{tmp_path / 'o.db'}", heartbeat_interval=1, grace_period=1)
    study = optuna.create_study(study_name="lease", storage=storage)
    dist: dict[str, Any] = {"x": optuna.distributions.FloatDistribution(0, 1)}
    let_go, kept = study.ask(dist), study.ask(dist)
    lease = DriverLease(study)
    lease.acquire()
    try:
        lease.track(let_go._trial_id)
        lease.track(kept._trial_id)
        lease.untrack(let_go._trial_id)  # its result came back: the lease no longer beats for it
        time.sleep(2.5)  # past the grace period, several beats of the lease's loop
        assert storage._get_stale_trial_ids(study._study_id) == [let_go._trial_id]
    finally:
        lease.release()
