"""The results a trial gets from the driver when its node returned none: skipped, lost, raised, or
interrupted."""

from __future__ import annotations

from dataclasses import replace

from orchestrator.driver.memory.learned import Prediction
from orchestrator.errors import MESSAGE_CHARS, TrialError, TrialLost
from orchestrator.records import Failure, FailureKind, FailureStage, ServerConfig, TrialResult, TrialStatus
from orchestrator.trial_log import LeftBehind

NOTHING_LEFT = LeftBehind()  # a trial whose folder the driver cannot read (another machine's, or none)


def predicted_oom(config: ServerConfig, prediction: Prediction) -> TrialResult:
    """Never launched: the memory model says it cannot fit (learned as infeasible all the same)."""
    return TrialResult(
        config=config,
        status=TrialStatus.PREDICTED_OOM,
        node_id="",
        command=(),
        failure=Failure(
            prediction.stage or FailureStage.KV_ALLOCATION, FailureKind.OOM, f"predicted: {prediction.reason}"
        ),
        predicted=prediction.figures(),
    )


def lost(config: ServerConfig, err: TrialLost, wall_s: float) -> TrialResult:
    """The worker or the node died under the trial: no figure exists, and no memory verdict."""
    return TrialResult(
        config=config, status=TrialStatus.LOST, node_id="", command=(), failure=err.failure(), wall_s=wall_s
    )


def internal_error(config: ServerConfig, err: TrialError, wall_s: float) -> TrialResult:
    """The trial's own code raised: FAILED at the stage it had reached, in the node's own words (the
    error's fields, as they crossed Ray)."""
    failure = err.failure()
    return TrialResult(
        config=config,
        status=TrialStatus.FAILED,
        node_id="",
        command=(),
        failure=replace(failure, message=f"the trial code raised: {err.message}"[:MESSAGE_CHARS]),
        wall_s=wall_s,
    )


def interrupted(
    config: ServerConfig,
    stage: FailureStage,
    why: str,
    wall_s: float = 0.0,
    node_id: str = "",
    left: LeftBehind = NOTHING_LEFT,
) -> TrialResult:
    """The driver stopped while the trial ran (`why`): nothing was measured. It costs no budget and its
    configuration is queued again (`TrialStatus.INTERRUPTED`). It was launched all the same: on
    ``node_id`` where the driver knows it, with the command and the server log its folder held (``left``,
    `trial_log.left_in`), which MLflow then shows (it said "not launched", with result.json alone)."""
    return TrialResult(
        config=config,
        status=TrialStatus.INTERRUPTED,
        node_id=node_id,
        command=left.command,
        failure=Failure(stage, FailureKind.INTERRUPTED, why),
        wall_s=wall_s,
        log_path=str(left.log_path) if left.log_path is not None else "",
        log_text=left.log_text,
    )
