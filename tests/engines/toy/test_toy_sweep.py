"""A whole sweep on the toy engine, as the simulated node's sweeps run in the unit tests: the product's own
`Sweep` on an in-process executor, each trial a real `TrialRun` that launches the toy's server, watches its
log with the toy's reader and benchmarks it through the toy's API; then the answer, its command and its
MLflow params. Nothing of SGLang's could stand in: the toy's server speaks neither its flags, nor its
log lines, nor its `/generate`."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import cast

from optuna.storages import InMemoryStorage

from benchmarks.search.oracle_sweep import NoTracking
from orchestrator.driver.answer.best_file import BEST_COMMAND, BestFile
from orchestrator.driver.answer.conclusion import conclude
from orchestrator.driver.dispatch.executor import Handle, OneNodeExecutor
from orchestrator.driver.loop.outcome import StopReason
from orchestrator.driver.loop.sweep import Sweep
from orchestrator.driver.store.study import open_study
from orchestrator.driver.store.tracking import Tracker
from orchestrator.mlflow_schema import LaunchParams, Param, command_from_params, parse_param, trial_params
from orchestrator.node.trial import TrialRun
from orchestrator.records import TrialResult, TrialStatus
from orchestrator.spec.sweep_spec import SweepSpec, parse_spec
from orchestrator.trial_events import TrialEvent, TrialRequest
from tests.engines.toy.toy_spec import ToyNode, toy_data

NODE = "toy-node"


class ToyExecutor(OneNodeExecutor):
    """One node, one slot: each trial runs in this process, its server a child of it."""

    def __init__(self) -> None:
        super().__init__(NODE, 1.0)
        self.results: dict[int, TrialResult] = {}
        self.pending: dict[int, TrialRequest] = {}

    def submit(self, request: TrialRequest, node_id: str) -> Handle:
        self.pending[request.number] = request
        return request.number

    def wait(self, handles: Sequence[Handle], timeout_s: float) -> tuple[list[Handle], list[TrialEvent]]:
        done = list(handles)[:1]
        for handle in done:
            request = self.pending.pop(cast(int, handle))
            self.results[request.number] = TrialRun(request, ToyNode(request.spec, NODE), None).run()
        return done, []

    def result(self, handle: Handle) -> TrialResult:
        return self.results[cast(int, handle)]


def _swept(spec: SweepSpec, tmp_path: Path) -> Sweep:
    """The product's sweep of `spec` on the toy's node, run to its end as the CLI runs it."""
    study = open_study(spec, "toy", InMemoryStorage(), resume=False)
    sweep = Sweep(
        spec,
        study,
        cast(Tracker, NoTracking()),
        n_trials=spec.budget.trials,
        workdir=tmp_path / "trials",
        sim_profile=None,
        executor=ToyExecutor(),
    )
    sweep.journal.folder = None
    sweep.prepare(resume=False)
    sweep.reserve_for_confirmation()
    sweep.run()
    sweep.confirm_best()
    return sweep


def test_a_whole_sweep_runs_on_the_toy_engine(tmp_path: Path) -> None:
    data = toy_data()
    data["budget"].update(trials=4, confirm_top=1, confirm_repeats=2)
    spec = parse_spec(data, "toy.yaml")
    sweep = _swept(spec, tmp_path)
    records = sweep.outcome.records
    launched = [r for r in records if r.result.command]
    assert len(launched) == 4, [(r.number, r.result.status, r.result.failure) for r in records]
    assert all(r.result.status is TrialStatus.OK for r in launched), [r.result.failure for r in launched]
    for r in launched:
        assert r.result.command[1:3] == ("-m", "toy_server")
        assert [s.concurrency for s in r.result.stages] == [2, 4] and r.objective
        assert r.result.resolved_args.max_running_requests == r.result.config.max_running_requests
        assert r.result.memory.kv_cache_tokens  # the toy's log, read by the toy's reader
    # The answer: a configuration that ran, and the toy's own command to serve it.
    concluded = conclude(records, spec, tmp_path, sweep.lossless.lossy)
    best = BestFile.read(tmp_path)
    assert best is not None and best == concluded.best
    by_number = {r.number: r for r in launched}
    assert best.trial in best.launches and {by_number[n].result.config.label() for n in best.launches} == {
        best.config_label
    }
    chosen = next(r for r in records if r.number == best.trial).result.config
    argv = shlex.split((tmp_path / BEST_COMMAND).read_text().split("exec ", 1)[1].replace("\\\n", " "))
    assert argv[1:3] == ["-m", "toy_server"]
    assert argv[argv.index("--toy-batch") + 1] == str(chosen.max_running_requests)
    assert not [a for a in argv if a.startswith(("--model-path", "--mem-fraction-static"))]
    # MLflow: the run names its engine, and a command rebuilt from its params is the toy's.
    params = trial_params(launched[0].result, LaunchParams.from_spec(spec))
    assert params[Param.ENGINE] == "toy"
    rebuilt = command_from_params({k: parse_param(v) for k, v in params.items()}, "1.2")
    assert rebuilt.startswith("python -m toy_server") and "--toy-batch" in rebuilt


def test_the_toys_own_value_is_searched_end_to_end(tmp_path: Path) -> None:
    """A value SGLang has no field for (`toy_tick_ms`, the toy's pause between decode steps, under its own
    flag `--toy-tick-ms`), declared in the toy's space and searched from the spec's `search.engine`: the
    same driver draws it, launches it, records it, and answers with the faster tick."""
    data = toy_data()
    data["search"]["engine"] = {"toy_tick_ms": {"choices": [1, 25]}}
    data["budget"].update(trials=6, confirm_top=1, confirm_repeats=2)
    spec = parse_spec(data, "toy.yaml")
    sweep = _swept(spec, tmp_path)
    launched = [r for r in sweep.outcome.records if r.result.command]
    ticks = {r.result.config.engine_value("toy_tick_ms") for r in launched}
    assert ticks == {1.0, 25.0}, [r.result.config.label() for r in launched]
    for r in launched:
        argv = list(r.result.command)
        assert float(argv[argv.index("--toy-tick-ms") + 1]) == r.result.config.engine_value("toy_tick_ms")
        assert f"toy_tick_ms={r.result.config.engine_value('toy_tick_ms'):g}" in r.result.config.label()
    # a 25 ms pause between steps serves far fewer tokens a second: the answer has the 1 ms tick
    slow = max(r.objective or 0.0 for r in launched if r.result.config.engine_value("toy_tick_ms") == 25.0)
    fast = max(r.objective or 0.0 for r in launched if r.result.config.engine_value("toy_tick_ms") == 1.0)
    assert fast > 2 * slow
    concluded = conclude(sweep.outcome.records, spec, tmp_path, sweep.lossless.lossy)
    best = BestFile.read(tmp_path)
    assert best is not None and best == concluded.best
    config = best.server_config()
    assert config is not None and config.engine_value("toy_tick_ms") == 1.0
    # MLflow: the value is a param of the run, and the command rebuilt from the params sets it
    record = next(r for r in launched if r.result.config == config)
    params = trial_params(record.result, LaunchParams.from_spec(spec))
    assert params["engine_value.toy_tick_ms"] == "1"
    rebuilt = command_from_params({k: parse_param(v) for k, v in params.items()}, "1.2")
    assert "--toy-tick-ms 1" in rebuilt


def test_a_value_the_engine_does_not_declare_is_refused_before_any_launch() -> None:
    import pytest

    from orchestrator.spec.search import SpecError

    data = toy_data()
    data["search"]["engine"] = {"toy_tock_ms": {"choices": [1]}}
    with pytest.raises(SpecError, match=r"search.engine: the toy engine has no toy_tock_ms.*toy_tick_ms"):
        parse_spec(data, "toy.yaml")


def test_an_engine_value_of_one_choice_changes_nothing_of_the_search(tmp_path: Path) -> None:
    """The proposal policy builds its configurations with the engine's own values: with one choice the
    sweep spends its budget on launches as without it. The policy once built them without, never found its
    proposals among the launched ones, answered 180 repeats from the record and stopped on only_repeats.
    (How many launches the confirmation adds turns on the toy's measured, wall-clock speed: not compared.)"""
    from orchestrator.driver.store.trial_attrs import TrialAttr

    for own in (None, {"toy_tick_ms": {"choices": [1]}}):
        data = toy_data()
        data["search"]["mem_fraction_static"] = {"choices": [0.7, 0.88]}
        if own is not None:
            data["search"]["engine"] = own
        data["budget"].update(trials=10, confirm_top=1, confirm_repeats=2)
        sweep = _swept(parse_spec(data, "toy.yaml"), tmp_path / str(own is not None))
        launched = [r for r in sweep.outcome.records if r.result.command]
        repeats = [t for t in sweep.study.get_trials(deepcopy=False) if TrialAttr.REPEAT_OF in t.user_attrs]
        assert sweep.outcome.stop_reason is StopReason.BUDGET_DONE, (own, sweep.outcome.stop_reason)
        assert len(repeats) <= 2 and len(launched) >= 9, (own, len(repeats), len(launched))
        if own is not None:
            assert all(r.result.config.engine_value("toy_tick_ms") == 1.0 for r in launched)


def test_the_baseline_and_a_known_good_configuration_take_the_engines_middle_value(tmp_path: Path) -> None:
    data = toy_data()
    data["search"]["engine"] = {"toy_tick_ms": {"choices": [1, 2, 25]}}
    data["budget"].update(trials=2, confirm_top=0, baseline=True)
    sweep = _swept(parse_spec(data, "toy.yaml"), tmp_path)
    first = sweep.outcome.records[:2]  # the baseline, then the known-good configuration (toy_data's)
    assert [r.result.config.speculative for r in first] == [False, True]
    assert [r.result.config.engine_value("toy_tick_ms") for r in first] == [2.0, 2.0]


def test_a_search_outside_the_engines_declared_bounds_is_refused() -> None:
    import pytest

    from orchestrator.spec.search import SpecError

    data = toy_data()
    data["search"]["engine"] = {"toy_tick_ms": {"low": -50, "high": -1}}
    with pytest.raises(
        SpecError, match=r"search\.engine\.toy_tick_ms: -50 is below the engine's least value, 0"
    ):
        parse_spec(data, "toy.yaml")


def test_a_continuous_range_of_the_engines_value_is_searched_at_its_ends_and_middle(tmp_path: Path) -> None:
    # a continuous range cannot be enumerated: the policy's trees hold it, its flag coverage takes three
    data = toy_data()
    data["search"]["engine"] = {"toy_tick_ms": {"low": 1, "high": 25}}
    data["budget"].update(trials=3, confirm_top=0)
    sweep = _swept(parse_spec(data, "toy.yaml"), tmp_path)
    launched = [r for r in sweep.outcome.records if r.result.command]
    assert len(launched) == 3 and all(r.result.status is TrialStatus.OK for r in launched)
    assert all(1 <= (r.result.config.engine_value("toy_tick_ms") or 0) <= 25 for r in launched)


def test_the_toys_own_rule_makes_two_ticks_one_server(tmp_path: Path) -> None:
    """The toy pauses whole milliseconds between decode steps (its rule, `SameServer` STEPPED by 1 ms):
    ticks 1.2 and 1.7 are one server. The driver and its policy know what they measured by the engine's
    rule, so only one of those two ticks is ever launched (a launch of the other measures nothing new),
    and the space of three ticks is two servers."""
    data = toy_data()
    data["search"]["engine"] = {"toy_tick_ms": {"choices": [1.2, 1.7, 25]}}
    data["search"].update(mem_fraction_static={"choices": [0.88]}, max_running_requests={"choices": [48]})
    data["budget"].update(trials=6, confirm_top=0)
    spec = parse_spec(data, "toy.yaml")
    sweep = _swept(spec, tmp_path)
    launched = [r for r in sweep.outcome.records if r.result.command]
    ticks = {r.result.config.engine_value("toy_tick_ms") or 0.0 for r in launched}
    assert len(ticks) == 2 and 25.0 in ticks, sorted(ticks)
    assert sweep._space_exhausted()
