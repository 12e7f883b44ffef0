"""The results a trial gets from the driver when its node returned none: skipped, lost, or raised."""

from __future__ import annotations

from orchestrator.memory_model import Prediction
from orchestrator.records import Failure, FailureKind, FailureStage, ServerConfig, TrialResult, TrialStatus


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


def lost(config: ServerConfig, err: Exception, wall_s: float) -> TrialResult:
    """The worker or the node died under the trial: no figure exists, and no memory verdict."""
    return TrialResult(
        config=config,
        status=TrialStatus.LOST,
        node_id="",
        command=(),
        failure=Failure(FailureStage.UNDER_LOAD, FailureKind.NODE_LOST, str(err).splitlines()[0][:500]),
        wall_s=wall_s,
    )


def internal_error(config: ServerConfig, err: Exception, wall_s: float) -> TrialResult:
    """The trial's own code raised: FAILED with the exception's last line (Ray's message ends with it)."""
    lines = [line for line in str(err).splitlines() if line.strip()]
    why = lines[-1].strip() if lines else type(err).__name__
    return TrialResult(
        config=config,
        status=TrialStatus.FAILED,
        node_id="",
        command=(),
        failure=Failure(
            FailureStage.UNDER_LOAD, FailureKind.INTERNAL_ERROR, f"the trial code raised: {why}"[:500]
        ),
        wall_s=wall_s,
    )
