"""One trial on a simulated node, outside Ray: each outcome, and the GPUs clean afterwards."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest

from orchestrator.cli import resolve_profile
from orchestrator.errors import TrialError
from orchestrator.node.backends import SimulatedNode, free_port, local_node_id, port_is_free
from orchestrator.node.trial import TrialRun, run_trial
from orchestrator.node.trial_bench import STAGE_FAILURE_GRACE_S
from orchestrator.records import FailureKind, FailureStage, TrialStatus, machine_of
from orchestrator.sim.nvml import GpuStateWriter
from orchestrator.spec.search import make_config
from orchestrator.spec.sweep_spec import load_spec
from orchestrator.trial_events import Phase, PhaseEvent, TrialRequest, failure_stage

DEMO = Path(__file__).resolve().parents[2] / "trials" / "demo.yaml"


def run(
    tmp_path: Path,
    config_args: tuple[Any, ...],
    on_phase: Callable[[PhaseEvent], None] | None = None,
    **timeouts: float,
) -> tuple[Any, SimulatedNode]:
    spec = load_spec(DEMO)
    spec = spec.model_copy(
        update={
            "timeouts": spec.timeouts.model_copy(update={"gpu_clean_s": 3.0, **timeouts}),
            "workload": spec.workload.model_copy(
                update={"num_prompts": 8, "output_len": 16, "concurrency": [4]}
            ),
        }
    )
    profile = resolve_profile(spec)
    node = SimulatedNode(spec, f"test-{tmp_path.name}", profile or {})
    request = TrialRequest(
        spec=spec,
        config=make_config(*config_args),
        number=0,
        workdir=str(tmp_path / "t"),
        sim_profile=profile,
    )
    return TrialRun(request, node, None, on_phase).run(), node


def assert_clean(node: SimulatedNode) -> None:
    assert node.server_pids() == set()


def test_simulated_node_lists_the_processes_on_its_gpus(tmp_path: Path) -> None:
    spec = load_spec(DEMO)
    node = SimulatedNode(spec, f"pids-{tmp_path.name}", resolve_profile(spec) or {})
    assert node.server_pids() == set()
    writer = GpuStateWriter(node.state_dir, [node.probe().snapshot()[-1].index])
    try:
        writer.update(100)
        assert node.server_pids() == {os.getpid()}
    finally:
        writer.remove()
    assert node.server_pids() == set()


def test_ok_trial_measures_and_leaves_gpus_clean(tmp_path: Path) -> None:
    result, node = run(tmp_path, (0.88, 128, 48, 3, 1, 4))
    assert result.status is TrialStatus.OK, result.failure
    stage = result.stages[0]
    assert stage.completed == 8 and stage.output_tok_per_s > 0
    assert stage.accept_length is not None and stage.accept_length > 1.2
    assert result.server_accept_length is not None and result.server_accept_length > 1.2
    assert (result.memory.weights_gb or 0) > 60 and (result.memory.kv_cache_tokens or 0) > 0
    assert result.resolved_args.max_running_requests == 48
    assert result.command[1:3] == ("-m", "orchestrator.sim.server")
    assert any(s.used_mib > 60_000 for s in result.gpu_before) is False
    assert_clean(node)


def test_phase_events_name_the_machine_once_its_gpus_are_checked(tmp_path: Path) -> None:
    """The driver's pruner judges an overhead-bound launch by its own machine's launches: the node names
    the machine (its GPUs' UUIDs, as the record keeps them) in every event from the GPU check on."""
    phases: list[PhaseEvent] = []
    result, _ = run(tmp_path, (0.88, 128, 48, 3, 1, 4), phases.append)
    assert result.status is TrialStatus.OK, result.failure
    assert machine_of(result.gpu_before).startswith("GPU-")
    later = [p for p in phases if p.phase is not Phase.GPU_CHECK]
    assert later and {p.machine for p in later} == {machine_of(result.gpu_before)}


def test_kv_oom_is_classified_and_timed(tmp_path: Path) -> None:
    result, node = run(tmp_path, (0.70, 128, 48, 3, 1, 4))
    assert result.status is TrialStatus.OOM
    assert result.failure is not None
    assert (result.failure.stage, result.failure.kind) == (FailureStage.KV_ALLOCATION, FailureKind.OOM)
    assert result.oom_to_clean_s is not None and result.oom_to_clean_s < 5
    assert_clean(node)


def test_graph_oom_is_classified(tmp_path: Path) -> None:
    # Kimi: 0.95 of the memory for weights + KV leaves too little for 512-wide graphs with a draft.
    result, node = run(tmp_path, (0.95, 512, 64, 5, 4, 12))
    assert result.status is TrialStatus.OOM, (result.status, result.failure)
    assert result.failure is not None
    assert result.failure.stage in (FailureStage.TARGET_GRAPH_CAPTURE, FailureStage.DRAFT_GRAPH_CAPTURE)
    assert_clean(node)


def test_dirty_gpus_refuse_the_node_naming_the_holder(tmp_path: Path) -> None:
    spec = load_spec(DEMO)
    node = SimulatedNode(spec, f"test-{tmp_path.name}", resolve_profile(spec) or {})
    stale = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        GpuStateWriter(node.state_dir, range(8), pid=stale.pid).update(50_000)
        result, _ = run(tmp_path, (0.88, 128, 48, 3, 1, 4), gpu_clean_s=0.5)
        assert result.status is TrialStatus.FAILED
        assert result.failure is not None and result.failure.kind is FailureKind.GPU_NOT_CLEAN
        assert f"pid {stale.pid}" in result.failure.message
        assert not result.command  # nothing was launched
    finally:
        stale.kill()
        stale.wait()
    time.sleep(0.1)
    assert_clean(node)


def test_startup_timeout_kills_the_tree(tmp_path: Path) -> None:
    result, node = run(tmp_path, (0.88, 128, 48, 3, 1, 4), startup_s=0.3)
    assert result.status is TrialStatus.TIMEOUT
    assert result.failure is not None and result.failure.kind is FailureKind.TIMEOUT
    assert_clean(node)


def test_a_taken_port_is_skipped_before_launch() -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        taken = s.getsockname()[1]
        assert not port_is_free("127.0.0.1", taken)
        assert free_port("127.0.0.1", start=taken) != taken


def test_infeasible_statuses() -> None:
    """Exactly the memory outcomes are learned as infeasible: a crash, a timeout, a lost node or a
    missed SLA says nothing about memory."""
    infeasible = {s for s in TrialStatus if s.infeasible}
    assert infeasible == {
        TrialStatus.OOM,
        TrialStatus.PREDICTED_OOM,
        TrialStatus.KV_PRESSURE,
        TrialStatus.OOM_UNDER_LOAD,
    }


def signal_mid_benchmark(tmp_path: Path, sig: int, benchmark_s: float) -> tuple[Any, SimulatedNode]:
    """Run a long trial on the simulated node and send `sig` to its server processes once it streams;
    returns the trial's result and the node."""
    import os
    import threading

    spec = load_spec(DEMO)
    spec = spec.model_copy(
        update={
            "timeouts": spec.timeouts.model_copy(
                update={"benchmark_s": benchmark_s, "stop_s": 1.0, "gpu_clean_s": 5.0}
            ),
            "workload": spec.workload.model_copy(
                update={"num_prompts": 64, "output_len": 512, "concurrency": [2]}
            ),
        }
    )
    profile = resolve_profile(spec) or {}
    node = SimulatedNode(spec, f"test-{tmp_path.name}", profile)
    request = TrialRequest(spec, make_config(0.88, 128, 48, 3, 1, 4), 0, str(tmp_path / "t"), profile)
    out: dict[str, Any] = {}
    runner = threading.Thread(target=lambda: out.update(result=TrialRun(request, node, None).run()))
    runner.start()
    log = tmp_path / "t" / "server.log"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and "Decode batch" not in (log.read_text() if log.exists() else ""):
        time.sleep(0.05)
    pids = node.server_pids()
    assert pids
    for pid in pids:
        os.kill(pid, sig)
    runner.join(timeout=60)
    return out["result"], node


@pytest.mark.slow  # waits out the benchmark's timeout
def test_server_hung_mid_benchmark_times_out_and_is_killed(tmp_path: Path) -> None:
    """SIGSTOP freezes the server while it streams: a real hang (alive, silent, deaf to SIGINT)."""
    import signal

    result, node = signal_mid_benchmark(tmp_path, signal.SIGSTOP, benchmark_s=4.0)
    assert result.status is TrialStatus.TIMEOUT
    assert result.failure is not None and result.failure.stage is FailureStage.UNDER_LOAD
    assert "SIGKILLed" in " ".join(result.notes)
    assert_clean(node)


@pytest.mark.slow  # two trials on the simulated node
def test_a_trial_folder_is_never_reused(tmp_path: Path) -> None:
    """A rerun that lands on an existing trial folder (same study name, same number) gets a fresh folder:
    the old log stays as it was and the new trial reads only its own lines."""
    first, _ = run(tmp_path, (0.70, 128, 48, 3, 1, 4))  # a KV OOM: its log says so
    assert first.status is TrialStatus.OOM
    old_log = Path(first.log_path).read_text()
    second, node = run(tmp_path, (0.88, 128, 48, 3, 1, 4))
    assert second.status is TrialStatus.OK, second.failure
    assert Path(first.log_path).read_text() == old_log
    assert second.log_path != first.log_path
    assert Path(second.log_path).read_text().count("server_args=") == 1
    assert second.startup_s and second.startup_s > 0
    assert_clean(node)


SECRET = "sk-live-7f3a9c2e1b"
MODEL_SECRET = "internal-model-name-42"


@pytest.mark.slow  # seconds of real time (a simulated server, a sweep or a wait); left out of `make unit`
def test_secrets_are_scrubbed_from_the_log_and_the_result(tmp_path: Path) -> None:
    """SGLang prints `api_key='...'` in its server_args line; the simulated node does the same. The
    server still gets the key (the benchmark authenticates with it), but no copy we keep holds it."""
    import pickle

    spec = load_spec(DEMO)
    server = spec.server.model_copy(
        update={
            "flags": [*spec.server.flags, "--api-key", SECRET, "--served-model-name", MODEL_SECRET],
            "secret_flags": ["--served-model-name"],
        }
    )
    spec = spec.model_copy(
        update={
            "server": server,
            "timeouts": spec.timeouts.model_copy(update={"gpu_clean_s": 3.0}),
            "workload": spec.workload.model_copy(
                update={"num_prompts": 8, "output_len": 16, "concurrency": [4]}
            ),
        }
    )
    profile = resolve_profile(spec)
    node = SimulatedNode(spec, f"test-{tmp_path.name}", profile or {})
    request = TrialRequest(spec, make_config(0.88, 128, 48, 3, 1, 4), 0, str(tmp_path / "t"), profile)
    result = TrialRun(request, node, None).run()
    # It measured: the key reached the server and the client sent it (else every request is a 401).
    assert result.status is TrialStatus.OK, result.failure
    assert result.stages[0].completed == 8
    log = Path(result.log_path).read_text()
    assert "api_key='****'" in log
    for secret in (SECRET, MODEL_SECRET):
        assert secret not in log
        assert secret.encode() not in pickle.dumps(result)
        for f in Path(result.log_path).parent.iterdir():
            assert secret.encode() not in f.read_bytes(), f
    assert_clean(node)


@pytest.mark.slow  # seconds of real time (a simulated server, a sweep or a wait); left out of `make unit`
def test_a_wrong_api_key_is_refused_by_the_simulated_node_as_by_sglang(tmp_path: Path) -> None:
    import asyncio

    import aiohttp

    spec = load_spec(DEMO)
    spec = spec.model_copy(
        update={
            "server": spec.server.model_copy(update={"flags": [*spec.server.flags, "--api-key", SECRET]}),
            "timeouts": spec.timeouts.model_copy(update={"gpu_clean_s": 3.0}),
        }
    )
    profile = resolve_profile(spec)
    node = SimulatedNode(spec, f"test-{tmp_path.name}", profile or {})
    from orchestrator.engines.process import ServerProcess

    plan = node.plan(make_config(0.88, 128, 48, 3, 1, 4), free_port("127.0.0.1"), tmp_path)
    server = ServerProcess(plan, tmp_path / "server.log")
    server.start()
    try:

        async def ask(headers: dict[str, str] | None) -> tuple[int, int]:
            async with aiohttp.ClientSession(headers=headers) as s:
                for _ in range(600):
                    try:
                        async with s.get(plan.base_url + "/health") as h:
                            if h.status == 200:
                                break
                    except aiohttp.ClientError:
                        pass
                    await asyncio.sleep(0.1)
                async with s.get(plan.base_url + "/health") as h, s.get(plan.base_url + "/server_info") as i:
                    return h.status, i.status

        assert asyncio.run(ask(None)) == (200, 401)
        assert asyncio.run(ask({"Authorization": "Bearer wrong"})) == (200, 401)
        assert asyncio.run(ask({"Authorization": f"Bearer {SECRET}"})) == (200, 200)
    finally:
        server.stop(5.0)


@pytest.mark.slow  # seconds of real time (a simulated server, a sweep or a wait); left out of `make unit`
def test_a_crash_under_load_is_failed_not_oom(tmp_path: Path) -> None:
    """A server killed mid-benchmark with no out-of-memory line in its log is a crash (`failed`, never
    learned as infeasible): a crash is not evidence of memory. A runtime OOM line is `oom_under_load`."""
    import signal

    result, node = signal_mid_benchmark(tmp_path, signal.SIGKILL, benchmark_s=30.0)
    assert result.status is TrialStatus.FAILED, result.failure
    assert not result.status.infeasible
    assert result.failure is not None and result.failure.stage is FailureStage.UNDER_LOAD
    assert result.failure.kind is not FailureKind.OOM
    assert_clean(node)


def test_a_failed_trials_message_from_the_log_is_scrubbed(tmp_path: Path) -> None:
    """The failure message is parsed from the server's log as it is written, before the log is scrubbed:
    a secret the server echoes in its error must still not reach the result."""
    import pickle

    secret = "internal-grammar-backend-42"
    spec = load_spec(DEMO)
    server = spec.server.model_copy(
        update={
            "flags": [*spec.server.flags, "--grammar-backend", secret],
            "secret_flags": ["--grammar-backend"],
        }
    )
    spec = spec.model_copy(
        update={"server": server, "timeouts": spec.timeouts.model_copy(update={"gpu_clean_s": 3.0})}
    )
    profile = resolve_profile(spec)
    node = SimulatedNode(spec, f"test-{tmp_path.name}", profile or {})
    request = TrialRequest(spec, make_config(0.88, 128, 48, 3, 1, 4), 0, str(tmp_path / "t"), profile)
    result = TrialRun(request, node, None).run()
    # SGLang's argument parser names the bad value: "invalid choice: '<the value>'".
    assert result.status is TrialStatus.FAILED and result.failure is not None
    assert "--grammar-backend: invalid choice: '****'" in result.failure.message
    assert secret.encode() not in pickle.dumps(result)
    assert_clean(node)


def test_a_trial_whose_own_code_raises_stops_its_server_and_says_where_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The trial's code raising once the server is up (here: the benchmark): the server is stopped on
    the way out, and the error names the phase the trial had reached, as fields, not as text."""
    spec = load_spec(DEMO)
    spec = spec.model_copy(update={"timeouts": spec.timeouts.model_copy(update={"gpu_clean_s": 3.0})})

    def broken_benchmark(self: TrialRun, *args: Any) -> Any:
        raise KeyError("output_tok_per_s")

    monkeypatch.setattr(TrialRun, "_benchmark", broken_benchmark)
    request = TrialRequest(
        spec, make_config(0.88, 128, 48, 3, 1, 4), 0, str(tmp_path / "t"), resolve_profile(spec)
    )
    phases: list[PhaseEvent] = []
    with pytest.raises(TrialError) as caught:
        run_trial(request, on_phase=phases.append)
    err = caught.value
    assert err.raised_type == "KeyError" and err.message == "KeyError: 'output_tok_per_s'"
    assert phases and phases[-1].phase is not Phase.STOPPING
    assert err.stage is failure_stage(phases[-1].phase)
    server = phases[-1].server
    assert server is not None
    assert not psutil.pid_exists(server.pid) or psutil.Process(server.pid).status() == psutil.STATUS_ZOMBIE
    assert_clean(SimulatedNode(spec, local_node_id(), resolve_profile(spec) or {}))


@pytest.mark.slow  # seconds of real time (a simulated server, a sweep or a wait); left out of `make unit`
def test_running_out_of_memory_while_serving_is_an_oom_under_load_though_requests_completed(
    tmp_path: Path,
) -> None:
    """The H200 sweep's trial 2 (tests/fixtures/sglang/0.5.17/llama8b-live): s4k2d8 at fraction 0.98 ran
    out of memory under load after whole requests had completed; SGLang then kept its port for 5 s and
    exited a moment after the connections dropped, so the stage ended with the server still alive. It was
    recorded as ok at 898.4 tok/s. It is an OOM under load: learned as infeasible, never the answer."""
    spec = load_spec(DEMO)
    spec = spec.model_copy(
        update={
            "timeouts": spec.timeouts.model_copy(update={"gpu_clean_s": 5.0, "stop_s": 2.0}),
            "workload": spec.workload.model_copy(
                update={"num_prompts": 64, "output_len": 32, "concurrency": [4]}
            ),
        }
    )
    # every forward needs more than start-up left free; the first to fail comes after 12 requests (the
    # server's and the trial's warm-ups, then two waves of the stage)
    serving = {"serving_gib_per_token": 100.0, "serving_oom_after_requests": 12}
    profile = {**(resolve_profile(spec) or {}), **serving}
    node = SimulatedNode(spec, f"test-{tmp_path.name}", profile)
    request = TrialRequest(spec, make_config(0.88, 128, 16, 3, 1, 4), 0, str(tmp_path / "t"), profile)
    result = TrialRun(request, node, None).run()
    log = (tmp_path / "t" / "server.log").read_text()
    assert "torch.OutOfMemoryError" in log and "SIGQUIT received" in log
    assert result.stages and result.stages[-1].completed > 0  # the case: requests completed before it
    assert result.status is TrialStatus.OOM_UNDER_LOAD, result.failure
    assert result.status.infeasible
    assert result.failure is not None
    assert (result.failure.stage, result.failure.kind) == (FailureStage.UNDER_LOAD, FailureKind.OOM)
    assert_clean(node)


@pytest.mark.slow  # a trial on the simulated server, and the stage-failure grace waited out
def test_a_stage_whose_requests_failed_while_the_server_kept_running_and_its_log_said_nothing_fails(
    tmp_path: Path,
) -> None:
    """Some requests of the stage fail (the server answers 400: their prompts are longer than its
    context length) and others complete; the server keeps running and its log reports no failure. The
    trial waits out the grace for the log or an exit to say why, then records the stage as a failed
    benchmark, not as an ok measurement of a server that served only part of the load."""
    spec = load_spec(DEMO)
    spec = spec.model_copy(
        update={
            "server": spec.server.model_copy(
                update={"flags": [*spec.server.flags, "--context-length", "100"]}
            ),
            "timeouts": spec.timeouts.model_copy(update={"gpu_clean_s": 3.0}),
            # prompts of 64-128 tokens: about a third are longer than the context length of 100
            "workload": spec.workload.model_copy(
                update={"num_prompts": 12, "output_len": 16, "range_ratio": 0.5, "concurrency": [4]}
            ),
        }
    )
    profile = resolve_profile(spec)
    node = SimulatedNode(spec, f"test-{tmp_path.name}", profile or {})
    request = TrialRequest(spec, make_config(0.88, 128, 48, 3, 1, 4), 0, str(tmp_path / "t"), profile)
    started = time.monotonic()
    result = TrialRun(request, node, None).run()
    waited = time.monotonic() - started
    assert result.stages, result.failure
    stage = result.stages[-1]
    assert 0 < stage.failed < stage.num_requests and stage.completed > 0, stage
    log = Path(result.log_path).read_text()
    assert '"POST /generate HTTP/1.1" 400' in log and "Traceback" not in log
    assert result.status is TrialStatus.FAILED, (result.status, result.failure)
    assert not result.status.infeasible  # nothing says it was memory
    assert result.failure is not None
    assert (result.failure.stage, result.failure.kind) == (
        FailureStage.UNDER_LOAD,
        FailureKind.BENCHMARK_ERROR,
    )
    assert (
        f"{stage.failed} of {stage.num_requests} requests failed at concurrency 4" in result.failure.message
    )
    assert waited >= STAGE_FAILURE_GRACE_S  # it gave the log its moment to say why
    assert_clean(node)
