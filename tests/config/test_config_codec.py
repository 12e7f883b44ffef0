"""A configuration survives each of its forms: Optuna params, MLflow params, the journal, the command line.

The configurations are every combination of a grid over each searched field (adaptive speculation and
its two tiers modes included), built with SGLang's rules as a study builds them, so a field one
direction drops and the other keeps shows up as a configuration that does not come back.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import fields
from pathlib import Path

import optuna
import pydantic
import pytest
import yaml

from orchestrator.config.adaptive import CONFIG_FILE, AdaptiveMode, launch_steps
from orchestrator.config.codec import config_from_mlflow, mlflow_params
from orchestrator.config.fields import SearchedField
from orchestrator.driver.answer.best_file import BestFile
from orchestrator.driver.answer.choose import Call, Verdict
from orchestrator.driver.answer.noise import NoiseSource, Regime
from orchestrator.driver.answer.summary import sglang_command
from orchestrator.driver.search.space import (
    config_from_params,
    known_good_params,
    params_for,
    space_configs,
    suggest_config,
)
from orchestrator.driver.store.journal import Journal
from orchestrator.engines.launch import launch_plan
from orchestrator.engines.sglang.command import parse_version
from orchestrator.engines.sglang.declaration import FIELD_FLAGS, SEARCHED_FLAGS
from orchestrator.engines.shell import shell_command
from orchestrator.mlflow_schema import (
    LaunchParams,
    Param,
    command_from_params,
    param_value,
    parse_param,
    trial_params,
)
from orchestrator.records import ServerConfig, TrialRecord, TrialResult, TrialStatus
from orchestrator.spec.search import (
    Choices,
    FloatRange,
    IntRange,
    KnownGood,
    SearchSpace,
    SpecError,
    make_config,
)
from orchestrator.spec.sweep_spec import OWNED_FLAGS, Backend, load_spec, parse_spec

DEMO = Path(__file__).resolve().parents[2] / "trials" / "demo.yaml"

# Steps 1..7 reach every tier SGLang's default adaptive config launches at (7).
SPACE = SearchSpace(
    mem_fraction_static=FloatRange(low=0.5, high=0.95),
    cuda_graph_max_bs=IntRange(low=8, high=512),
    max_running_requests=IntRange(low=4, high=256),
    speculative_num_steps=IntRange(low=1, high=7),
    speculative_eagle_topk=Choices(choices=[1, 2, 4, 8]),
    speculative_num_draft_tokens=IntRange(low=2, high=57),
    speculative_adaptive=[AdaptiveMode.OFF, AdaptiveMode.DEFAULT, AdaptiveMode.TIERS],
)


def every_config() -> list[ServerConfig]:
    """Baselines and every speculative combination (top-k 1 with each adaptive mode; top-k > 1 with a
    few draft-token counts of its tree), at seeded memory settings."""
    rng = random.Random(20261201)
    memory = [
        (round(rng.uniform(0.5, 0.95), 4), rng.choice([8, 64, 512]), rng.choice([4, 48, 256]))
        for _ in range(3)
    ]
    memory.append((0.71, 128, 48))  # a fraction that floating point prints long (0.7100000000000001)
    out: set[ServerConfig] = set()
    for mem, gbs, mrr in memory:
        out.add(make_config(mem, gbs, mrr))
        for steps, mode in itertools.product(range(1, 8), AdaptiveMode):
            out.add(make_config(mem, gbs, mrr, steps, 1, None, mode))
        for steps, topk in itertools.product(range(1, 8), (2, 4, 8)):
            for draft in sorted({steps + 1, (steps + 1 + topk * steps + 1) // 2, topk * steps + 1}):
                out.add(make_config(mem, gbs, mrr, steps, topk, draft))
    return sorted(out, key=lambda c: c.label())


CONFIGS = every_config()


def test_the_grid_covers_every_searched_field_and_mode() -> None:
    for f in SearchedField:
        assert len({getattr(c, f.value) for c in CONFIGS}) >= 2, f
    assert {c.speculative_adaptive for c in CONFIGS} == {None, "default", "tiers"}


def test_a_configuration_survives_its_optuna_params() -> None:
    for config in CONFIGS:
        assert config_from_params(params_for(config)) == config
        assert config_from_params(params_for(config, SPACE)) == config


def test_an_adaptive_trials_params_read_back_adaptive() -> None:
    # What Optuna stores for an adaptive trial of searched steps 2 (SGLang's tiers launch it at 7).
    params = {
        "mem_fraction_static": 0.85,
        "cuda_graph_max_bs": 64,
        "max_running_requests": 48,
        "speculative_num_steps": 2,
        "speculative_eagle_topk": 1,
        "speculative_adaptive": "default",
    }
    config = config_from_params(params)
    assert config is not None and config.speculative_adaptive == "default"
    assert config != config_from_params({**params, "speculative_adaptive": "off"})


def test_a_configurations_optuna_params_are_a_point_of_the_space_that_gives_it_back() -> None:
    # Steps 1..4 searched: SGLang's default tiers launch at 7 whatever steps were searched, so the
    # params must name a searched steps, not the launch's 7 (outside the range: Optuna cannot store it).
    space = SPACE.model_copy(
        update={
            "speculative_num_steps": IntRange(low=1, high=4),
            "speculative_eagle_topk": Choices(choices=[1, 2]),
        }
    )
    inside = [
        c
        for c in CONFIGS
        if not c.speculative
        or (
            c.speculative_eagle_topk in (1, 2)
            and (c.speculative_adaptive == "default" or c.speculative_num_steps <= 4)
        )
    ]
    assert any(c.speculative_adaptive == "default" for c in inside)
    for config in inside:
        study = optuna.create_study(storage=optuna.storages.InMemoryStorage())
        study.enqueue_trial(params_for(config, space))
        trial = study.ask()
        if not config.speculative:
            trial.set_user_attr("baseline", True)
        assert suggest_config(trial, space) == config
        steps = trial.params.get("speculative_num_steps")
        assert steps is None or 1 <= steps <= 4, config.label()


def test_a_configuration_survives_its_mlflow_params() -> None:
    launch = LaunchParams.from_spec(load_spec(DEMO))
    for config in CONFIGS:
        assert config_from_mlflow(mlflow_params(config)) == config
        result = TrialResult(config, TrialStatus.OK, "n", ("python", "-m", "sglang.launch_server"))
        assert config_from_mlflow(trial_params(result, launch)) == config  # as the tracker logs it


def test_a_run_logged_before_the_adaptive_param_reads_back_fixed() -> None:
    params = mlflow_params(make_config(0.85, 64, 48, 3, 1, None))
    del params[Param.SPECULATIVE_ADAPTIVE]
    assert config_from_mlflow(params) == make_config(0.85, 64, 48, 3, 1, None)


def test_a_configuration_survives_the_journal(tmp_path: Path) -> None:
    journal = Journal(tmp_path)
    for number, config in enumerate(CONFIGS):
        journal.write(TrialRecord(number, TrialResult(config, TrialStatus.OK, "n", ()), None, None))
    assert [r.result.config for r in journal.read(range(len(CONFIGS)))] == CONFIGS


@pytest.mark.parametrize("version", ["0.5.9", "0.5.17", "0.5.23"])
def test_every_command_of_a_configuration_is_the_launchs_own(version: str) -> None:
    # The launch, best_command.sh and a command read back from MLflow once rendered the configuration
    # three ways; a flag one of them spelled or placed differently (the adaptive tiers' file, the
    # host and port, a fixed flag written `--flag=value`) gave a command that was not the one launched.
    demo = load_spec(DEMO)
    flags = ["--trust-remote-code", "--page-size=16", "--api-key", "a-long-enough-secret"]
    server = demo.server.model_copy(update={"flags": flags})
    spec = demo.model_copy(update={"backend": Backend.REAL, "server": server})
    adaptive_runs = parse_version(version) >= (0, 5, 17)
    for config in CONFIGS:
        if config.speculative_adaptive and not adaptive_runs:
            continue  # a trial refuses it before launching: SGLang has no --speculative-adaptive
        plan = launch_plan(
            spec,
            config,
            version=version,
            port=30000,
            tp_size=spec.node.gpus,
            adaptive_config_path=CONFIG_FILE,
        )
        launched = plan.masked_argv()
        assert "a-long-enough-secret" not in launched
        for field in SearchedField:  # every value the configuration sets is on its command line
            value = getattr(config, field.value)
            if value is not None and field is not SearchedField.SPECULATIVE_ADAPTIVE:
                at = launched.index(FIELD_FLAGS[field].at(parse_version(version)))
                assert launched[at + 1] == param_value(value), (field, config.label())
        result = TrialResult(config, TrialStatus.OK, "n", launched, server_version=version)
        assert tuple(sglang_command(TrialRecord(0, result, 1.0), spec)) == launched  # best_command.sh
        params = {k: parse_param(v) for k, v in trial_params(result, LaunchParams.from_spec(spec)).items()}
        assert command_from_params(params, version) == shell_command(("python", *launched[1:])), (
            config.label()
        )


def test_the_searched_fields_are_the_spec_sections_fields_and_the_configurations() -> None:
    names = {f.value for f in SearchedField}
    # beside them, each holds the engine's own values (none for SGLang): `engine_values`, `search.engine`
    assert names | {"engine_values"} == {f.name for f in fields(ServerConfig)}
    assert names | {"engine"} == set(SearchSpace.model_fields) and names == set(KnownGood.model_fields)
    assert names <= {p.value for p in Param}
    assert SEARCHED_FLAGS <= OWNED_FLAGS


def test_a_spec_may_not_set_adaptive_speculation_in_its_fixed_flags() -> None:
    # Every trial would run adaptive while the study records fixed ones.
    data = yaml.safe_load(DEMO.read_text())
    for flag in ("--speculative-adaptive", "--speculative-adaptive-config=x.json"):
        data.setdefault("server", {})["flags"] = [flag]
        with pytest.raises(SpecError, match="set by the sweep"):
            parse_spec(data)


def test_launch_steps_are_the_searched_steps_for_tiers() -> None:
    # The MLflow, journal and command-line forms hold the launch's steps; the tiers mode must give
    # back the searched steps from them, which holds because its largest tier is the searched steps.
    assert all(launch_steps(AdaptiveMode.TIERS, s) == s for s in range(1, 16))


def test_known_good_params_keep_the_users_steps_and_give_back_its_configuration() -> None:
    spec = load_spec(DEMO.parent / "h200-chat.yaml")
    assert {k.speculative_adaptive for k in spec.known_good} == set(AdaptiveMode)
    for known in spec.known_good:
        study = optuna.create_study(storage=optuna.storages.InMemoryStorage())
        study.enqueue_trial(known_good_params(known, spec.search))
        trial = study.ask()
        assert suggest_config(trial, spec.search) == known.to_config()
        assert trial.params["speculative_num_steps"] == known.speculative_num_steps


def test_a_configuration_survives_best_json(tmp_path: Path) -> None:
    verdict = Verdict(
        call=Call.ALONE, statement="", noise_source=NoiseSource.PRIOR, regime=Regime.GPU_BOUND, launch_sd=0.01
    )
    for config in CONFIGS:
        best = BestFile(
            config_label=config.label(),
            config=BestFile.config_fields(config),
            launches=[1],
            launch_tok_per_s=[1.0],
            median_tok_per_s=1.0,
            trial=1,
            verdict=verdict,
        )
        best.write(tmp_path)
        read = BestFile.read(tmp_path)
        assert read is not None and read.server_config() == config


def test_an_engines_own_values_survive_optuna_mlflow_and_the_journal(tmp_path: Path) -> None:
    """A value only the engine knows (`search.engine`) travels with the configuration every way: drawn as
    an Optuna param of its own name, logged as `engine_value.NAME`, kept by the journal, in the label."""
    data = yaml.safe_load(DEMO.read_text())
    space = SearchSpace.model_validate(
        {
            **data["search"],
            "engine": {"tick_ms": {"choices": [1, 4]}, "chunk": {"low": 2, "high": 3, "step": 1}},
        }
    )
    assert isinstance(space.engine["tick_ms"], Choices)
    configs = space_configs(space)
    assert {c.engine_value("tick_ms") for c in configs} == {1.0, 4.0}
    assert {c.engine_value("chunk") for c in configs} == {2.0, 3.0}
    config = next(c for c in configs if c.speculative and c.engine_value("tick_ms") == 4.0)
    assert config.engine_values == (("chunk", config.engine_value("chunk")), ("tick_ms", 4.0))
    assert "tick_ms=4" in config.label()
    params = params_for(config, space)
    assert params["tick_ms"] == 4.0 and config_from_params(params) == config
    study = optuna.create_study()
    study.enqueue_trial(params)
    assert suggest_config(study.ask(), space) == config
    assert config_from_mlflow(mlflow_params(config)) == config
    assert mlflow_params(config)["engine_value.tick_ms"] == "4"
    # an engine's value is not rounded as the fraction is: its text reads back the same float
    for odd in (1048580.0, 0.123456789):
        wide = make_config(0.8, 64, 16, engine_values={"tick_ms": odd})
        assert config_from_mlflow(mlflow_params(wide)) == wide
    journal = tmp_path / "config.json"
    journal.write_bytes(pydantic.TypeAdapter(ServerConfig).dump_json(config))
    assert pydantic.TypeAdapter(ServerConfig).validate_json(journal.read_bytes()) == config


def test_sglang_declares_no_value_of_its_own() -> None:
    data = yaml.safe_load(DEMO.read_text())
    data["search"]["engine"] = {"tick_ms": {"choices": [1]}}
    with pytest.raises(SpecError, match=r"search\.engine: the sglang engine has no tick_ms"):
        parse_spec(data, "demo.yaml")
    data["search"]["engine"] = {"max_running_requests": {"choices": [16]}}
    with pytest.raises(SpecError, match="a field of the search section itself"):
        parse_spec(data, "demo.yaml")
