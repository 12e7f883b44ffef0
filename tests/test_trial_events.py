"""The channel between running trials and the driver: phases in the order a trial goes through them, stage
reports answered by the driver's verdict without polling, and the console lines they turn into."""

from __future__ import annotations

import itertools
import logging
import os
import re
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import ray

from orchestrator.cli import resolve_profile
from orchestrator.driver.console.progress import ProgressPrinter
from orchestrator.driver.dispatch import cluster
from orchestrator.driver.dispatch.placement import TRIAL_SLOT
from orchestrator.driver.dispatch.trial_channel import EventFeed, phase_hook, stage_hook
from orchestrator.driver.loop.outcome import Progress
from orchestrator.driver.store.commands import tool_command
from orchestrator.node.backends import SimulatedNode
from orchestrator.node.trial import TrialRun
from orchestrator.records import FailureKind, FailureStage, StageMetrics
from orchestrator.spec.search import make_config
from orchestrator.spec.sweep_spec import load_spec
from orchestrator.trial_events import Phase, PhaseEvent, StageReport, TrialRequest

DEMO = Path(__file__).resolve().parents[1] / "trials" / "demo.yaml"
METRICS = StageMetrics(8, 8, 8, 0, 1.0, 500.0, 8.0, 10.0, 12.0, 5.0, 9.0, 5.0, 2.0)


@pytest.mark.slow  # seconds of real time (a simulated server, a sweep or a wait); left out of `make unit`
def test_a_trial_reports_its_phases_in_order(tmp_path: Path) -> None:
    spec = load_spec(DEMO)
    spec = spec.model_copy(
        update={
            "timeouts": spec.timeouts.model_copy(update={"gpu_clean_s": 3.0}),
            "workload": spec.workload.model_copy(update={"num_prompts": 4, "output_len": 8}),
        }
    )
    profile = resolve_profile(spec)
    node = SimulatedNode(spec, f"test-{tmp_path.name}", profile or {})
    request = TrialRequest(
        spec=spec, config=make_config(0.88, 128, 48, 3, 1, 4), number=7, workdir=str(tmp_path / "t")
    )
    seen: list[PhaseEvent] = []
    stages: list[int] = []

    def on_stage(step: int, metrics: StageMetrics) -> bool:
        stages.append(step)
        return True

    result = TrialRun(request, node, on_stage, seen.append).run()
    assert result.status.value == "ok", result.failure
    phases = [e.phase for e in seen]
    # Start-up phases come from the server's own log; each appears once, in the server's order.
    assert phases[:3] == [Phase.GPU_CHECK, Phase.LAUNCH, Phase.LOADING_WEIGHTS]
    # The log is read every 50 ms, so a short stage can pass unseen under load; those seen come each
    # once (the draft's weights told as the draft's, whenever this SGLang loads them), the target's
    # weights before anything of the draft's.
    startup = [p for p in phases if p is not Phase.BENCHMARK]
    assert len(startup) == len(set(startup)), phases
    assert Phase.LOADING_WEIGHTS in phases and Phase.WARMUP in phases, phases
    if Phase.DRAFT_MODEL in phases:
        assert phases.index(Phase.LOADING_WEIGHTS) < phases.index(Phase.DRAFT_MODEL), phases
    bench = [e for e in seen if e.phase is Phase.BENCHMARK]
    steps = len(spec.workload.concurrency)
    assert [(e.step, e.steps) for e in bench] == [(k, steps) for k in range(steps)] and stages == list(
        range(steps)
    )
    assert bench[0].describe() == f"benchmarking stage 1 of {steps}"
    assert phases[-1] is Phase.STOPPING
    assert all(e.number == 7 and e.node_id == node.node_id for e in seen)
    assert all(a.at_unix <= b.at_unix for a, b in itertools.pairwise(seen))
    assert all(e.started_unix == result.started_unix for e in seen)


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    if ray.is_initialized():
        ray.shutdown()
    with tempfile.TemporaryDirectory(prefix="ss-ev-", dir="/tmp") as tmp:
        ray.init(
            address="local",  # a new instance, never another Ray running on this machine
            num_cpus=1,
            num_gpus=8,  # one simulated node with a trial slot, for the product's own trial task
            resources={TRIAL_SLOT: 1},
            include_dashboard=False,
            logging_level=logging.WARNING,
            log_to_driver=False,
            _temp_dir=tmp,
        )
        try:
            yield
        finally:
            ray.shutdown()


@ray.remote(num_cpus=0)
def _reporter(channel: Any, steps: int, wait_s: float) -> list[bool]:
    on_stage, on_phase = stage_hook(channel, 3, wait_s), phase_hook(channel)
    out = []
    for step in range(steps):
        on_phase(PhaseEvent(3, Phase.BENCHMARK, 0.0, time.time(), "n", step, steps))
        out.append(on_stage(step, METRICS))
    return out


def _drive(feed: EventFeed, trial: Any, verdict: bool | None) -> list[Any]:
    """The driver's loop as `Sweep.run` has it; answers each stage with `verdict` (None: never answers)."""
    events: list[Any] = []
    while True:
        ready, _ = ray.wait([trial, feed.pending()], num_returns=1, timeout=10.0)
        assert ready, "neither the trial nor the feed answered in 10 s"
        for event in feed.take(ready):
            events.append((event, time.time()))
            if isinstance(event, StageReport) and verdict is not None:
                feed.decide(event.number, event.step, verdict)
        if trial in ready:
            return events


@pytest.mark.slow  # starts a local Ray
def test_the_driver_wakes_on_a_report_and_its_verdict_reaches_the_trial(local_ray: None) -> None:
    feed = EventFeed()
    try:
        trial = _reporter.remote(feed.actor, 3, 10.0)
        # The verdict "stop" goes back to the trial: it stops each stage it is asked about.
        events = _drive(feed, trial, verdict=False)
        assert ray.get(trial) == [False, False, False]
        reports = [(e, t) for e, t in events if isinstance(e, StageReport)]
        assert [e.step for e, _ in reports] == [0, 1, 2]
        assert [e.step for e, _ in events if isinstance(e, PhaseEvent)] == [0, 1, 2]
        # No polling interval between a report and the driver: it holds it within a few milliseconds.
        # (The old broker was polled every 0.2 s: about 100 ms on average.)
        lags = sorted(seen - e.at_unix for e, seen in reports)
        assert lags[1] < 0.1, lags
    finally:
        feed.close()


@pytest.mark.slow  # starts a local Ray
def test_a_trial_without_a_verdict_measures_on(local_ray: None) -> None:
    feed = EventFeed()
    try:
        trial = _reporter.remote(feed.actor, 2, 0.3)
        _drive(feed, trial, verdict=None)
        assert ray.get(trial) == [True, True]
    finally:
        feed.close()


@pytest.mark.slow  # starts a local Ray
def test_a_trial_measures_on_when_the_channel_is_gone(local_ray: None) -> None:
    feed = EventFeed()
    feed.close()
    assert ray.get(_reporter.remote(feed.actor, 1, 0.3)) == [True]


@pytest.mark.slow  # starts a local Ray
def test_the_login_line_names_the_token_ray_itself_uses(
    local_ray: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`ray.init` starts with token authentication on; the line names the token file and the command that
    prints the token, and that command prints the token in that file."""
    login = cluster.dashboard_login(tool_command("ray"))
    assert login is not None
    # Named as the MLflow and Optuna lines name their tools: the one beside the interpreter (seen: the
    # `ray` script's absolute path beside `.venv/bin/mlflow`).
    assert f"(print it: {tool_command('ray')} get-auth-token)" in login
    found = re.fullmatch(r"log in with the token in (\S+) \(print it: (\S+) get-auth-token\)", login)
    assert found, login
    printed = subprocess.run(
        [found.group(2), "get-auth-token"], capture_output=True, text=True, check=True, timeout=60
    ).stdout.strip()
    assert printed and Path(found.group(1)).read_text().strip() == printed
    # Another token file, named through Ray's own variable: the line names that one.
    other = tmp_path / "token"
    other.write_text("x" * 32)
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(other))
    assert f"the token in {other} " in (cluster.dashboard_login() or "")


def _event(number: int, phase: Phase, at: float, step: int | None = None) -> PhaseEvent:
    return PhaseEvent(
        number, phase, 100.0, 100.0 + at, "abcdef0123456789", step, 2 if step is not None else None
    )


def test_off_a_terminal_each_event_is_one_plain_line() -> None:
    out: list[str] = []
    printer = ProgressPrinter(4, tty=False, write=out.append)
    p = Progress(running=1)

    def came(event: PhaseEvent) -> None:  # as the loop files an event (`driver.loop.pruning`)
        p.file(event)

    came(_event(0, Phase.GPU_CHECK, 0.0))
    printer.show(p)
    printer.show(p)  # nothing new: nothing printed
    came(_event(0, Phase.LOADING_WEIGHTS, 1.5))
    printer.show(p)
    # Two events between prints (a quick start-up): both printed, in order, not the latest alone.
    came(_event(0, Phase.CUDA_GRAPHS, 2.0))
    came(_event(0, Phase.WARMUP, 2.1))
    printer.show(p)
    came(_event(0, Phase.BENCHMARK, 9.0, step=1))
    printer.show(p)
    text = "".join(out)
    assert "\r" not in text
    assert text.splitlines() == [
        "  trial   0 started on node abcdef012345: checking GPUs",
        "  trial   0 loading weights (at 1.5 s)",
        "  trial   0 capturing CUDA graphs (at 2.0 s)",
        "  trial   0 warming up (at 2.1 s)",
        "  trial   0 benchmarking stage 2 of 2 (at 9.0 s)",
    ]


def test_a_phase_that_arrives_after_a_later_one_is_not_shown_as_the_trials_phase() -> None:
    # The channel's actor is async: two events a trial sent a moment apart can reach the driver swapped
    # (a fresh clone's `make sweep` printed "trial 9 started ...: starting the server", then "checking GPUs
    # (at 0.0 s)"). The older one is stale: neither printed after the newer nor kept as the phase.
    out: list[str] = []
    printer = ProgressPrinter(4, tty=False, write=out.append)
    p = Progress(running=1)
    p.file(_event(0, Phase.LAUNCH, 0.02))
    p.file(_event(0, Phase.GPU_CHECK, 0.0))
    printer.show(p)
    assert p.phases[0].phase is Phase.LAUNCH
    p.file(_event(0, Phase.LOADING_WEIGHTS, 1.5))
    printer.show(p)
    assert "".join(out).splitlines() == [
        "  trial   0 started on node abcdef012345: starting the server",
        "  trial   0 loading weights (at 1.5 s)",
    ]
    # a relaunch of the same trial number starts afresh: its first phase is new, whatever came before
    p.file(PhaseEvent(0, Phase.GPU_CHECK, 200.0, 200.0, "abcdef0123456789"))
    assert p.phases[0].phase is Phase.GPU_CHECK


def test_on_a_terminal_the_live_line_shows_each_running_trial(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    out: list[str] = []
    printer = ProgressPrinter(4, tty=True, write=out.append, now=lambda: 142.4)
    p = Progress(done=1, running=2)
    p.phases = {2: _event(2, Phase.CUDA_GRAPHS, 3.0), 3: _event(3, Phase.BENCHMARK, 20.0, step=0)}
    printer.show(p)
    assert out[-1].startswith("\r  [1/4 done, 2 running")
    assert "trial 2 capturing CUDA graphs 42s; trial 3 benchmarking stage 1 of 2 42s" in out[-1]
    assert "\n" not in out[-1]
    monkeypatch.setenv("COLUMNS", "60")  # never wider than the terminal: a wrapped line cannot be redrawn
    printer.show(p)
    assert len(out[-1]) == 60


def test_on_an_80_column_terminal_the_running_trial_s_phase_and_seconds_show(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Seen at 80 columns: "  [0/1 done, 1 running, 0 pruned for OOM, 0 failed] best 983.4 tok/s (trial 0, "
    and "... | trial 0 benchmarki": the counts and the best's name took the width, the phase was cut."""
    monkeypatch.setenv("COLUMNS", "80")
    out: list[str] = []
    printer = ProgressPrinter(12, tty=True, write=out.append, now=lambda: 142.4)
    p = Progress(done=3, running=1, best_tok_s=983.4, best_number=0, best_name="trial 0, no speculation")
    p.phases = {4: _event(4, Phase.BENCHMARK, 20.0, step=1)}
    printer.show(p)
    assert len(out[-1]) == 80
    assert "trial 4 benchmarking stage 2 of 2 42s" in out[-1], out[-1]
    assert "3/12 done" in out[-1] and "983.4" in out[-1]


def test_the_live_line_keeps_its_form_while_the_phases_change_length(monkeypatch: pytest.MonkeyPatch) -> None:
    """Seen at 80 columns under `make sweep`: "[7/12 done, 1 running, 0 pruned for OOM, 0 failed] best
    1069.2 tok/s (trial 6) | ..." and "[7/12 done, 1 running, 0 OOM, 0 failed] best 1069.2 tok/s | ..."
    took turns as the running trial's phase grew and shrank, the counts flickering in and out. Once a
    shorter form was needed at this width, the line keeps it."""
    monkeypatch.setenv("COLUMNS", "115")
    out: list[str] = []
    printer = ProgressPrinter(12, tty=True, write=out.append, now=lambda: 142.4)
    p = Progress(done=7, running=1, best_tok_s=1069.2, best_number=6, best_name="trial 6")
    p.phases = {7: _event(7, Phase.BENCHMARK, 20.0, step=0)}
    printer.show(p)
    long_phase = out[-1]
    p.phases = {7: _event(7, Phase.WARMUP, 20.0)}
    printer.show(p)
    short_phase = out[-1]
    assert "pruned for OOM" not in long_phase, long_phase  # too wide for 115 columns with this phase
    assert "pruned for OOM" not in short_phase, short_phase  # and kept so with a shorter one
    monkeypatch.setenv("COLUMNS", "200")  # a wider terminal: the whole line again
    printer.show(p)
    assert "pruned for OOM" in out[-1]


def test_a_best_that_is_a_median_says_so_in_the_shorter_form(monkeypatch: pytest.MonkeyPatch) -> None:
    """Seen at 120 columns under `make sweep`: "best 1070.1 tok/s" then "best 1068.6 tok/s" after a
    confirmation launch, nothing saying why it fell: the form that fits had dropped the best's name,
    "median of trials 6, 9, 10". The shorter form says the figure is a median."""
    monkeypatch.setenv("COLUMNS", "120")
    out: list[str] = []
    printer = ProgressPrinter(12, tty=True, write=out.append, now=lambda: 142.4)
    p = Progress(done=9, running=1, best_tok_s=1068.6, best_number=6, best_name="median of trials 6, 9, 10")
    p.best_launches = 3
    p.phases = {11: _event(11, Phase.BENCHMARK, 20.0, step=0)}
    printer.show(p)
    assert "(median of trials 6, 9, 10)" not in out[-1]  # the whole does not fit
    assert "best median 1068.6 tok/s" in out[-1], out[-1]
    assert "trial 11 benchmarking stage 1 of" in out[-1]
    p.best_launches, p.best_name = 1, "trial 6"
    printer.show(p)
    assert "best 1068.6 tok/s" in out[-1] and "median" not in out[-1]


@ray.remote(num_cpus=0, max_retries=0)
def _raises() -> None:
    raise ValueError("zip() argument 2 is longer than argument 1")


@ray.remote(num_cpus=0, max_retries=0)
def _raises_on_two_lines() -> None:
    raise ValueError("zip() argument 2 is longer than argument 1\n(the tokenizer's vocabulary: 32000)")


@ray.remote(num_cpus=0, max_retries=0)
def _dies() -> None:
    os._exit(1)  # the worker dies as a node's would: no exception comes back, only its absence


@pytest.mark.slow  # starts a local Ray
def test_the_ray_executor_tells_a_bug_in_the_trial_from_a_lost_worker(local_ray: None) -> None:
    from orchestrator.driver.dispatch.cluster import RayExecutor
    from orchestrator.driver.dispatch.executor import TrialError, TrialLost

    executor = RayExecutor()
    with pytest.raises(TrialError, match="zip"):
        executor.result(_raises.remote())
    with pytest.raises(TrialLost):
        executor.result(_dies.remote())


@pytest.mark.slow  # starts a local Ray
def test_what_a_trial_raised_is_classified_by_its_fields_not_by_the_wording_of_ray_s_text(
    local_ray: None,
) -> None:
    """The driver once took the last line of Ray's text for the cause: a message on two lines left the
    exception's type and its first line out of the trial's record."""
    from orchestrator.driver.dispatch.cluster import RayExecutor
    from orchestrator.driver.dispatch.executor import TrialError
    from orchestrator.driver.loop import without_launch

    with pytest.raises(TrialError) as caught:
        RayExecutor().result(_raises_on_two_lines.remote())
    result = without_launch.internal_error(make_config(0.88, 128, 48, 3, 1, 4), caught.value, 1.0)
    assert result.failure is not None
    assert result.failure.kind is FailureKind.INTERNAL_ERROR
    assert (
        result.failure.message
        == "the trial code raised: ValueError: zip() argument 2 is longer than argument 1"
    )
    assert "32000" in result.failure.detail  # the whole of it, with its traceback, kept beside


@pytest.mark.slow  # starts a local Ray
def test_a_trial_task_whose_own_code_raises_is_a_trial_error_not_a_lost_node(
    local_ray: None, tmp_path: Path
) -> None:
    """The product's trial task on real Ray, raising inside the trial (its folder cannot be made: an
    OSError, which must not pass for a node's death): a free, re-queued lost node would relaunch it
    forever."""
    from orchestrator.driver.dispatch.cluster import RayExecutor
    from orchestrator.driver.dispatch.executor import TrialError

    spec = load_spec(DEMO)
    (tmp_path / "a-file").write_text("")
    request = TrialRequest(
        spec, make_config(0.88, 128, 48, 3, 1, 4), 0, str(tmp_path / "a-file" / "t"), resolve_profile(spec)
    )
    executor = RayExecutor()
    executor.open()
    try:
        handle = executor.submit(request, "")
        with pytest.raises(TrialError, match="a-file") as caught:
            executor.result(handle)
    finally:
        executor.close()
    # Its fields came back across Ray as the node set them: where the trial was, what raised, the traceback.
    err = caught.value
    assert err.stage is FailureStage.LAUNCH and err.raised_type == "FileExistsError"
    assert "Traceback" in err.detail and "fresh_folder" in err.detail
