"""The memory prior of a real-pair spec, as the driver builds it, with the pair's model folders replaced by
their committed config.json copies (the weights stay on the GPU node)."""

from __future__ import annotations

from pathlib import Path

from orchestrator.driver.loop.node_memory import memory_model_for
from orchestrator.driver.memory.prior_model import PriorMemoryModel
from orchestrator.spec.sweep_spec import load_spec

MODELS = Path(__file__).resolve().parents[1] / "fixtures" / "models"


def pair_prior(spec_path: Path) -> PriorMemoryModel:
    """The prior `spec_path` (a trials/smollm2-*.yaml) gets, before any launch has told it the card."""
    spec = load_spec(spec_path)
    model = spec.model.model_copy(
        update={"path": str(MODELS / "smollm2-135m"), "draft_path": str(MODELS / "smollm2-135m-eagle3")}
    )
    prior, _ = memory_model_for(spec.model_copy(update={"model": model}), None)
    assert isinstance(prior, PriorMemoryModel)
    return prior
