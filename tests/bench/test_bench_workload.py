import pytest

from orchestrator.bench.workload import RequestSpec, synthetic_requests


def test_same_seed_gives_the_same_workload_and_another_seed_does_not() -> None:
    a = synthetic_requests(20, 64, 32, vocab_size=32000, seed=7, range_ratio=0.5)
    b = synthetic_requests(20, 64, 32, vocab_size=32000, seed=7, range_ratio=0.5)
    c = synthetic_requests(20, 64, 32, vocab_size=32000, seed=8, range_ratio=0.5)
    assert a == b
    assert a != c


def test_range_ratio_one_gives_fixed_lengths_and_ids_inside_the_vocabulary() -> None:
    requests = synthetic_requests(50, 100, 16, vocab_size=50, seed=0)
    assert len(requests) == 50
    assert all(isinstance(r, RequestSpec) for r in requests)
    assert {len(r.input_ids) for r in requests} == {100}
    assert {r.max_new_tokens for r in requests} == {16}
    ids = {i for r in requests for i in r.input_ids}
    assert min(ids) >= 0 and max(ids) < 50
    assert len(ids) > 40  # random ids, not a constant or a short run


def test_lengths_are_drawn_between_ratio_times_len_and_len() -> None:
    requests = synthetic_requests(300, 100, 40, vocab_size=1000, seed=3, range_ratio=0.5)
    in_lens = [len(r.input_ids) for r in requests]
    out_lens = [r.max_new_tokens for r in requests]
    assert min(in_lens) >= 50 and max(in_lens) <= 100
    assert min(out_lens) >= 20 and max(out_lens) <= 40
    assert len(set(in_lens)) > 20 and len(set(out_lens)) > 10


def test_prompts_share_no_long_prefix() -> None:
    # The radix cache must not be able to reuse one prompt's KV for another.
    requests = synthetic_requests(30, 64, 8, vocab_size=32000, seed=1)
    prefixes = {r.input_ids[:4] for r in requests}
    assert len(prefixes) == 30


def test_range_ratio_zero_never_asks_for_zero_tokens() -> None:
    requests = synthetic_requests(200, 3, 2, vocab_size=10, seed=5, range_ratio=0.0)
    assert min(len(r.input_ids) for r in requests) >= 1
    assert min(r.max_new_tokens for r in requests) >= 1


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"num_prompts": 0}, "num_prompts"),
        ({"input_len": 0}, "input_len"),
        ({"output_len": 0}, "output_len"),
        ({"vocab_size": 1}, "vocab_size"),
        ({"range_ratio": 1.5}, "range_ratio"),
        ({"range_ratio": -0.1}, "range_ratio"),
        ({"input_len": 2.5}, "input_len"),
    ],
)
def test_impossible_workloads_raise_naming_the_field(kwargs: dict[str, float], field: str) -> None:
    args: dict[str, float] = {
        "num_prompts": 4,
        "input_len": 8,
        "output_len": 8,
        "vocab_size": 100,
        "seed": 0,
        "range_ratio": 1.0,
    }
    args.update(kwargs)
    with pytest.raises(ValueError, match=field):
        synthetic_requests(**args)  # type: ignore[arg-type]
