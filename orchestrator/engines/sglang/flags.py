"""The SGLang flags the sweep owns: a fixed flag may not set them, or the trial would not be what the
study thinks it measured."""

from __future__ import annotations

from orchestrator.config_fields import SEARCHED_FLAGS

OWNED_FLAGS: frozenset[str] = SEARCHED_FLAGS | {
    "--model-path",
    "--model",
    "--tp-size",
    "--tensor-parallel-size",
    "--host",
    "--port",
    "--speculative-algorithm",
    "--speculative-draft-model-path",
    "--speculative-draft-model",
}
