"""SGLang's answer to the lossless check's request: the top two log-probabilities of each output position."""

from __future__ import annotations

import pytest

from orchestrator.engines.sglang.wire import SGLANG_API
from orchestrator.records import Margin


def test_the_greedy_request_asks_for_the_top_two_logprobs_of_the_output_only() -> None:
    body = SGLANG_API.greedy_body([1, 2, 3], 4, scored=True)
    assert body["return_logprob"] is True and body["top_logprobs_num"] == 2
    assert body["logprob_start_len"] == -1  # output tokens only: the prompt is not scored
    assert body["sampling_params"]["temperature"] == 0 and "stream" not in body


def test_an_unscored_greedy_request_asks_for_no_logprobs() -> None:
    """The speculative servers' request: log-probabilities through EAGLE-3's verify have failed in SGLang
    (sgl-project/sglang#17349, #14046), and only the baseline's margins are read."""
    body = SGLANG_API.greedy_body([1, 2, 3], 4)
    assert not {"return_logprob", "top_logprobs_num", "logprob_start_len"} & set(body)


def test_margins_are_read_from_meta_info_output_top_logprobs() -> None:
    # The shape SGLang's /generate answers with return_logprob and top_logprobs_num: per output
    # position a list of [logprob, token_id, text] (text null without detokenizing), best first.
    answer = {
        "output_ids": [260, 11, 12],
        "meta_info": {
            "output_top_logprobs": [
                [[-1.864, 260, None], [-1.963, 8009, None]],
                [[-0.01, 11, None], [-5.01, 40, None]],
                None,  # a position the server did not score
            ],
        },
    }
    margins = SGLANG_API.greedy_margins(answer)
    assert margins is not None and len(margins) == 3
    first = margins[0]
    assert first is not None and first.runner_up == 8009 and first.nats == pytest.approx(0.099)
    assert margins[1] == Margin(pytest.approx(5.0), 40) and margins[2] is None


def test_a_tie_the_sampler_broke_the_other_way_names_the_token_not_chosen() -> None:
    """On an H100 SGLang answered position 24 of an MT-Bench prompt with token 260 while its top-two list
    put 8009 first at the same log-probability: the runner-up is the token the server did not emit, never
    the emitted one (read as the list's second entry, the tie was called lossy with a margin of 0)."""
    answer = {
        "output_ids": [260, 11],
        "meta_info": {
            "output_top_logprobs": [
                [[-1.9737, 8009, None], [-1.9737, 260, None]],
                [[-0.2, 40, None], [-0.1, 11, None]],  # out of order: the emitted one is still the best
            ],
        },
    }
    assert SGLANG_API.greedy_margins(answer) == (Margin(0.0, 8009), Margin(pytest.approx(0.1), 40))


@pytest.mark.parametrize(
    "answer", [{"output_ids": [1]}, {"meta_info": {}}, {"meta_info": {"output_top_logprobs": None}}, [1]]
)
def test_an_answer_without_logprobs_has_no_margins(answer: object) -> None:
    assert SGLANG_API.greedy_margins(answer) is None
