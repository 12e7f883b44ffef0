"""An interrupted launch (Ctrl-C, SIGTERM, a driver killed) costs no budget and is re-queued, and it is
shown everywhere the same way: a row `interrupted` in the console table, an MLflow run ended KILLED, a
FAIL in Optuna with its status attribute. Driven through the product's own `Sweep` and `Tracker` (an
in-process executor, a real MLflow and Optuna store on disk)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import mlflow
import pytest
from optuna.trial import TrialState

from benchmarks.truth.cases import CASES, case_spec
from benchmarks.truth.oracle import Oracle
from orchestrator import cli
from orchestrator.driver.answer.summary import count_line, render_table, table_rows
from orchestrator.driver.dispatch.executor import Handle, OneNodeExecutor
from orchestrator.driver.loop.sweep import Sweep
from orchestrator.driver.store.commands import module_command
from orchestrator.driver.store.study import launched_count, open_study
from orchestrator.driver.store.study_lock import DriverLease, current_driver
from orchestrator.driver.store.tracking import Tracker
from orchestrator.driver.store.trial_attrs import StudyAttr, TrialAttr
from orchestrator.mlflow_schema import Tag
from orchestrator.records import FailureStage, TrialRecord, TrialResult, TrialStatus
from orchestrator.sim.profile import load_profile
from orchestrator.spec.sweep_spec import MemorySpec, SweepSpec
from orchestrator.trial_events import Phase, PhaseEvent, TrialEvent, TrialRequest

NODE = "node-a"
BUDGET = 4
READY = "[2026-12-07 08:43:15] The server is fired up and ready to roll!"  # SGLang's own line


class Interrupting(OneNodeExecutor):
    """One node, one slot: a trial finishes at once with the oracle's figures, until trial
    `interrupt_at` is benchmarking; then the driver's wait raises KeyboardInterrupt (Ctrl-C). With
    `ray_gone`, cancelling and closing raise too, as when the same Ctrl-C took Ray down first."""

    def __init__(self, oracle: Oracle, interrupt_at: int | None = None, ray_gone: bool = False) -> None:
        super().__init__(NODE, float(oracle.gpus))
        self.oracle = oracle
        self.interrupt_at = interrupt_at
        self.ray_gone = ray_gone
        self._requests: dict[int, TrialRequest] = {}
        self.submitted: list[int] = []

    def submit(self, request: TrialRequest, node_id: str) -> Handle:
        self._requests[request.number] = request
        self.submitted.append(request.number)
        # What a node writes as it launches (`node.trial`): the command, then the server's log.
        folder = Path(request.workdir)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "command.txt").write_text("python3 -m sglang.launch_server --port 30000\n")
        (folder / "server.log").write_text(f"the server log of trial {request.number}\n{READY}\n")
        return request.number

    def wait(self, handles: Sequence[Handle], timeout_s: float) -> tuple[list[Handle], list[TrialEvent]]:
        number = cast(int, handles[0])
        if number == self.interrupt_at:
            if getattr(self, "_told", False):
                raise KeyboardInterrupt
            self._told = True
            event = PhaseEvent(number, Phase.BENCHMARK, 0.0, 1.0, NODE, step=0, steps=2)
            return [], [event]
        return [handles[0]], []

    def result(self, handle: Handle) -> TrialResult:
        return self.oracle.evaluate(self._requests[cast(int, handle)].config).result(node_id=NODE)

    def cancel(self, handle: Handle) -> None:
        if self.ray_gone:
            raise ConnectionError("ray is gone")

    def close(self) -> None:
        if self.ray_gone:
            raise ConnectionError("ray is gone")


@pytest.fixture(scope="module")
def oracle() -> Oracle:
    case = CASES["tight"]
    spec = case_spec(case, gpus=1).model_copy(update={"memory": MemorySpec(prior=False)})
    return Oracle(spec, load_profile(case.name))


class Driver:
    """One invocation of the sweep on the study in `root`, as the CLI builds it (lease, tracker)."""

    def __init__(self, spec: SweepSpec, root: Path, executor: Interrupting, resume: bool) -> None:
        self.storage = f"sqlite:///{root / 'optuna.db'}"
        self.tracking = f"sqlite:///{root / 'mlflow.db'}"
        self.study = open_study(spec, "x2", self.storage, resume)
        before = current_driver(self.study)
        self.lease = DriverLease(self.study)
        self.lease.acquire()
        self.tracker = Tracker(self.tracking, "x2", root / "x2" / "spool")
        self.tracker.start("sweep", {}, {})
        self.closed_runs = self.tracker.close_abandoned(self.study, before)
        self.printed: list[TrialRecord] = []
        self.sweep = Sweep(
            spec,
            self.study,
            self.tracker,
            n_trials=BUDGET,
            workdir=root / "x2",
            sim_profile=None,
            on_record=self.printed.append,
            lease=self.lease,
            executor=executor,
        )
        self.sweep.prepare(resume)

    def table(self) -> list[Any]:
        return table_rows(self.study.get_trials(deepcopy=False), self.sweep.outcome.records)


def _spec(oracle: Oracle) -> SweepSpec:
    return oracle.spec.model_copy(update={"budget": oracle.spec.budget.model_copy(update={"baseline": True})})


def _runs(tracking: str) -> list[Any]:
    client = mlflow.MlflowClient(tracking_uri=tracking)
    experiment = client.get_experiment_by_name("x2")
    assert experiment is not None
    return list(client.search_runs([experiment.experiment_id], max_results=100))


def _trial_runs(tracking: str, number: int) -> list[Any]:
    return [r for r in _runs(tracking) if r.data.tags.get(Tag.TRIAL_NUMBER) == str(number)]


def test_a_launch_interrupted_by_ctrl_c_is_shown_everywhere_and_costs_no_budget(
    oracle: Oracle, tmp_path: Path
) -> None:
    spec = _spec(oracle)
    first = Driver(spec, tmp_path, Interrupting(oracle, interrupt_at=2, ray_gone=True), resume=False)
    with pytest.raises(KeyboardInterrupt):
        first.sweep.run()
    first.lease.release()
    trial = first.study.trials[2]
    # Optuna: closed, its configuration queued again, and its status says what became of it.
    assert trial.state is TrialState.FAIL and TrialAttr.CLOSED in trial.user_attrs
    assert trial.user_attrs[TrialAttr.STATUS] == TrialStatus.INTERRUPTED.value
    assert launched_count(first.study) == 1  # trial 1 only: the baseline is free, the interrupted too
    # The console: a line for it, and a row in the table.
    last = first.printed[-1]
    assert last.number == 2 and last.result.status is TrialStatus.INTERRUPTED
    assert [(r.number, r.status) for r in first.table()][-1] == (2, "interrupted")
    # MLflow: its run, ended KILLED, with the same status.
    (run,) = _trial_runs(first.tracking, 2)
    assert run.info.status == "KILLED" and run.data.tags[Tag.STATUS] == "interrupted"
    # It was launched, on its node, and its server's log is the file a user opens it for (it read
    # "(not launched)" with result.json alone).
    _assert_launched_with_its_log(first.tracking, run, NODE)

    resumed = Driver(spec, tmp_path, Interrupting(oracle), resume=True)
    resumed.sweep.run()
    rows = resumed.table()
    assert (2, "interrupted") in [(r.number, r.status) for r in rows]
    # Every launch of the budget ran besides it, and the count line says what the row is.
    assert launched_count(resumed.study) == BUDGET
    line = count_line(rows, BUDGET)
    assert f"the baseline + {BUDGET} of the {BUDGET}-trial budget" in line
    assert "1 interrupted (re-queued, not counted)" in line
    assert "interrupted" in render_table(rows, BUDGET)
    requeued = [t for t in resumed.study.trials if t.user_attrs.get(TrialAttr.REQUEUED_FROM) == 2]
    assert len(requeued) == 1 and requeued[0].params == trial.params
    assert requeued[0].user_attrs[TrialAttr.STATUS] == TrialStatus.OK.value
    assert len(_trial_runs(first.tracking, 2)) == 1


def _assert_launched_with_its_log(tracking: str, run: Any, node: str | None) -> None:
    note = run.data.tags["mlflow.note.content"]
    assert "not launched" not in note, note
    if node is not None:
        assert f"on node `{node}`" in note, note
    client = mlflow.MlflowClient(tracking_uri=tracking)
    files = {f.path for f in client.list_artifacts(run.info.run_id)}
    assert {"server.log", "launch_command.sh"} <= files, files
    log_file = client.download_artifacts(run.info.run_id, "server.log")
    assert Path(log_file).read_text() == f"the server log of trial 2\n{READY}\n"


class _Killed(Interrupting):
    """kill -9 of the driver while trial `interrupt_at` benchmarks: the process ends on the spot, with no
    `finally` run, no lease released, no MLflow run closed."""

    def wait(self, handles: Sequence[Handle], timeout_s: float) -> tuple[list[Handle], list[TrialEvent]]:
        if handles and handles[0] == self.interrupt_at:
            os._exit(9)
        return super().wait(handles, timeout_s)


def _killed_driver(spec: SweepSpec, root: Path, oracle: Oracle) -> None:
    """Run a driver in a forked process that is killed mid-trial, and wait for it to be gone."""
    pid = os.fork()
    if pid == 0:  # the driver
        try:
            driver = Driver(spec, root, _Killed(oracle, interrupt_at=2), resume=False)
            (root / "parent").write_text(driver.tracker.parent_run_id)
            driver.sweep.run()
        finally:
            os._exit(1)  # never reached after the kill; never run the test session's teardown here
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 9


def test_after_kill_9_the_next_driver_shows_the_trial_and_closes_the_dead_drivers_runs(
    oracle: Oracle, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    spec = _spec(oracle)
    _killed_driver(spec, tmp_path, oracle)
    dead_parent = (tmp_path / "parent").read_text()
    tracking = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = mlflow.MlflowClient(tracking_uri=tracking)
    assert client.get_run(dead_parent).info.status == "RUNNING"  # what kill -9 leaves

    caplog.set_level("WARNING")
    resumed = Driver(spec, tmp_path, Interrupting(oracle), resume=True)
    # The console says it, as a trial line (no raw log line of the driver's own).
    assert [(r.number, r.result.status) for r in resumed.printed] == [(2, TrialStatus.INTERRUPTED)]
    failure = resumed.printed[0].result.failure
    assert failure is not None and "its driver stopped" in failure.message
    # Its log says how far it got (killed while it benchmarked, it read "launch: ... before any benchmark
    # stage ended", where Ctrl-C at the same point read "under_load"): its server was serving.
    assert failure.stage is FailureStage.UNDER_LOAD, failure
    assert "after its server was ready" in failure.message, failure.message
    assert not [r for r in caplog.records if "stale" in r.getMessage()]
    trial = resumed.study.trials[2]
    assert trial.state is TrialState.FAIL and trial.user_attrs[TrialAttr.STATUS] == "interrupted"
    (run,) = _trial_runs(tracking, 2)
    assert run.info.status == "KILLED"
    _assert_launched_with_its_log(tracking, run, None)
    # Filed under the driver that launched it (the dead one), not under the one that found it dead.
    assert run.data.tags["mlflow.parentRunId"] == dead_parent != resumed.tracker.parent_run_id
    # The dead driver's parent run: KILLED, with a tag saying why, and only that one.
    assert resumed.closed_runs == [dead_parent]
    dead = client.get_run(dead_parent)
    assert dead.info.status == "KILLED"
    assert "stopped without closing" in dead.data.tags[Tag.CLOSED_REASON]
    assert client.get_run(resumed.tracker.parent_run_id).info.status == "RUNNING"

    resumed.sweep.run()
    rows = resumed.table()
    assert (2, "interrupted") in [(r.number, r.status) for r in rows]
    assert launched_count(resumed.study) == BUDGET
    assert f"the baseline + {BUDGET} of the {BUDGET}-trial budget" in count_line(rows, BUDGET)


def test_ctrl_c_ends_the_parent_run_killed_and_says_the_whole_command_to_continue(
    oracle: Oracle, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    driver = Driver(_spec(oracle), tmp_path, Interrupting(oracle, interrupt_at=2), resume=False)
    args = cli.build_parser().parse_args(
        ["trials/demo.yaml", "--study", "x2", "--out", str(tmp_path), "--no-dashboard"]
    )
    assert cli.search_and_confirm(driver.sweep, driver.tracker, driver.lease, args) == 130
    parent = mlflow.MlflowClient(tracking_uri=driver.tracking).get_run(driver.tracker.parent_run_id)
    assert parent.info.status == "KILLED" and "interrupted" in parent.data.tags[Tag.CLOSED_REASON]
    err = capsys.readouterr().err
    # Not a bare `--resume`: that continues the spec's own study (`demo`), not x2.
    command = module_command(
        "orchestrator.sweep",
        "trials/demo.yaml",
        "--study",
        "x2",
        "--out",
        str(tmp_path),
        "--no-dashboard",
        "--resume",
    )
    assert command in err
    assert driver.study.user_attrs[StudyAttr.DRIVER] is None  # the lease is given back


def test_the_command_to_continue_keeps_the_flags_that_name_the_study_and_its_stores() -> None:
    stores = ["--storage", "sqlite:///o.db", "--tracking-uri", "http://m:5000", "--ray-address", "auto"]
    others = ["--trials", "20", "--time-budget", "600", "--warm-start", "-v"]
    args = cli.build_parser().parse_args(["my spec.yaml", "--study", "x2", *stores, *others])
    assert cli.resume_command(args) == module_command("orchestrator.sweep") + (
        " 'my spec.yaml' --study x2 --tracking-uri http://m:5000 "
        "--storage sqlite:///o.db --ray-address auto --time-budget 600 -v --resume"
    )
    plain = cli.build_parser().parse_args([])
    assert cli.resume_command(plain, study="demo") == (
        module_command("orchestrator.sweep", plain.spec, "--study", "demo", "--resume")
    )


def test_under_make_the_command_to_continue_is_make_s_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """`make sweep` runs the venv's python, which a bare `python` on the user's PATH is not."""
    monkeypatch.setenv("MAKELEVEL", "1")
    args = cli.build_parser().parse_args(["trials/demo.yaml", "--study", "x2"])
    assert cli.resume_command(args) == "make sweep ARGS='trials/demo.yaml --study x2 --resume'"
