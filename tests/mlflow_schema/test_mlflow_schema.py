"""The MLflow schema: what a trial is written as, and what is read back from it."""

from __future__ import annotations

from pathlib import Path

from orchestrator.config.codec import config_from_mlflow
from orchestrator.mlflow_schema import (
    Artifact,
    LaunchParams,
    Param,
    command_from_params,
    parse_param,
    result_json,
    run_engine,
    sweep_params,
    trial_artifacts,
    trial_metrics,
    trial_params,
)
from orchestrator.records import (
    MemoryAccount,
    ResolvedLaunch,
    StageMetrics,
    TrialRecord,
    TrialResult,
    TrialStatus,
)
from orchestrator.secrets import MASK
from orchestrator.spec.search import make_config
from orchestrator.spec.sweep_spec import load_spec

DEMO = Path(__file__).resolve().parents[2] / "trials" / "demo.yaml"
ARGV = ("python", "-m", "sglang.launch_server", "--mem-fraction-static", "0.71")


def demo_launch(*flags: str) -> LaunchParams:
    spec = load_spec(DEMO)
    server = spec.server.model_copy(update={"flags": [*spec.server.flags, *flags]})
    return LaunchParams.from_spec(spec.model_copy(update={"server": server}))


def test_a_secret_of_the_specs_flags_is_masked_in_the_params() -> None:
    launch = demo_launch("--api-key", "a-long-enough-secret")
    result = TrialResult(make_config(0.71, 128, 48, 3, 1, 4), TrialStatus.OK, "n", ARGV)
    params = trial_params(result, launch)
    assert params["api_key"] == MASK
    assert params["mem_fraction_static"] == "0.71"  # as the command writes it, whatever the float's digits


def test_a_configuration_never_launched_has_only_its_own_params() -> None:
    config = make_config(0.94, 512, 48, 3, 1, 4)
    params = trial_params(TrialResult(config, TrialStatus.PREDICTED_OOM, "", ()), demo_launch())
    assert Param.TP_SIZE not in params and Param.MODEL_PATH not in params
    assert config_from_mlflow(params) == config


def test_the_baseline_has_no_speculative_algorithm_and_no_draft() -> None:
    baseline = TrialResult(make_config(0.85, 128, 48), TrialStatus.OK, "n", ARGV, dataset="random")
    params = trial_params(baseline, demo_launch())
    assert params[Param.SPECULATIVE_ALGORITHM] == "none" and Param.SPECULATIVE_DRAFT_MODEL_PATH not in params
    assert params[Param.DATASET] == "random"


def test_a_command_rebuilt_from_params_has_only_sglang_flags() -> None:
    result = TrialResult(make_config(0.85, 128, 48, 3, 1, 4), TrialStatus.OK, "n", ARGV, dataset="random")
    params = {k: parse_param(v) for k, v in trial_params(result, demo_launch()).items()}
    command = command_from_params(params, "0.5.17")
    assert "--mem-fraction-static 0.85" in command and "--tp-size 8" in command
    assert (
        "--dataset" not in command and "--backend" not in command and "--speculative-adaptive" not in command
    )


def test_every_run_names_its_engine_and_a_run_without_one_reads_back_as_sglangs() -> None:
    spec = load_spec(DEMO)
    assert sweep_params(spec, "demo.yaml", 12)[Param.ENGINE] == "sglang"
    launched = TrialResult(make_config(0.85, 128, 48, 3, 1, 4), TrialStatus.OK, "n", ARGV)
    skipped = TrialResult(make_config(0.94, 512, 48, 3, 1, 4), TrialStatus.PREDICTED_OOM, "", ())
    for result in (launched, skipped):
        params = trial_params(result, demo_launch())
        assert params[Param.ENGINE] == spec.engine == run_engine(params)
    # A run written before the engine was recorded: no such param, and its command is SGLang's.
    old = {k: parse_param(v) for k, v in trial_params(launched, demo_launch()).items() if k != Param.ENGINE}
    assert run_engine(old) == "sglang"
    assert command_from_params(old, "0.5.17").startswith("python -m sglang.launch_server")
    # The engine param is no flag of the command.
    assert "--engine" not in command_from_params({**old, Param.ENGINE: "sglang"}, "0.5.17")


def test_metrics_and_artifacts_of_a_measured_trial() -> None:
    stage = StageMetrics(8, 16, 16, 0, 2.0, 512.0, 8.0, 30.0, 60.0, 5.0, 9.0, 6.0, 2.5)
    result = TrialResult(
        make_config(0.85, 128, 48, 3, 1, 4),
        TrialStatus.OK,
        "n",
        ARGV,
        stages=(stage,),
        memory=MemoryAccount(kv_cache_tokens=1000),
        resolved_args=ResolvedLaunch(max_running_requests=48),
        log_text="ready\n",
    )
    metrics = trial_metrics(TrialRecord(0, result, objective=512.0))
    assert metrics["output_tok_per_s"] == 512.0 and metrics["accept_length"] == 2.5
    assert metrics["kv_cache_tokens"] == 1000.0 and metrics["resolved_max_running_requests"] == 48.0
    files = trial_artifacts(result)
    assert set(files) == {Artifact.SERVER_LOG, Artifact.LAUNCH_COMMAND, Artifact.RESULT}
    assert "log_text" not in result_json(result) and files[Artifact.SERVER_LOG] == "ready\n"
