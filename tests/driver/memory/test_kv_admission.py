"""SGLang's admission and retraction rules, replayed: when the trial's KV probe would see retractions."""

from __future__ import annotations

from orchestrator.driver.memory.kv_admission import retracts


def test_a_pool_that_holds_every_request_never_retracts() -> None:
    assert not retracts(pool=64 * 400, requests=64, input_len=256, output_len=128, per_step=4)


def test_a_pool_far_too_small_retracts() -> None:
    assert retracts(pool=64 * 100, requests=64, input_len=256, output_len=128, per_step=4)


def test_admission_control_keeps_a_slightly_short_pool_from_retracting() -> None:
    # 8 requests of 384 tokens ask 3072; a pool of 2365 admits fewer at once and never has to retract
    # (the search benchmark's "tight" card at fraction 0.84 served this way).
    assert not retracts(pool=2365, requests=8, input_len=256, output_len=128, per_step=2)


def test_not_even_one_prompt_fits() -> None:
    assert retracts(pool=100, requests=4, input_len=256, output_len=128, per_step=1)
