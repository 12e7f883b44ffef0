"""Workloads from text: datasets, the built-in tokenizer, weighted mixes and the errors for bad input."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestrator.bench.chatgen import generated_chat
from orchestrator.bench.client import RequestOutcome
from orchestrator.bench.textdata import DatasetError, Role, load_jsonl, load_sharegpt
from orchestrator.bench.tokenizer import BuiltinTokenizer
from orchestrator.bench.traffic import build_requests, check_workload, dataset_breakdown
from orchestrator.bench.workload import RequestSpec
from orchestrator.spec.dataset_ref import parse_ref
from orchestrator.spec.search import SpecError
from orchestrator.spec.sweep_spec import load_spec, parse_spec

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "datasets"


def demo_data(**workload: Any) -> dict[str, Any]:
    data = yaml.safe_load((REPO / "trials" / "demo.yaml").read_text())
    data["workload"].update(workload)
    return dict(data)


def write_spec(tmp_path: Path, **workload: Any) -> Path:
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(demo_data(**workload)))
    return path


def test_sharegpt_file_cuts_each_conversation_at_its_last_user_turn() -> None:
    conversations = load_sharegpt(FIXTURES / "chat.sharegpt.json").conversations
    assert len(conversations) == 3  # the item without a user turn is skipped
    second = conversations[1]
    assert [m.role for m in second.messages] == [Role.SYSTEM, Role.USER, Role.ASSISTANT, Role.USER]
    assert second.answer is not None and second.answer.startswith("Water it when")
    assert conversations[2].answer is None


def test_jsonl_file_reads_prompts_messages_and_max_tokens() -> None:
    conversations = load_jsonl(FIXTURES / "code.jsonl").conversations
    assert len(conversations) == 4  # the blank line is skipped
    assert conversations[0].max_tokens == 48
    assert conversations[1].answer is not None and "[::-1]" in conversations[1].answer
    assert conversations[2].messages[-1].role is Role.USER


def test_an_empty_prompt_is_skipped_as_an_empty_user_turn_is(tmp_path: Path) -> None:
    """`{"prompt": ""}` was read as a request (a sweep ran on two blank prompts), while a `messages` user
    turn without text was skipped: the same rule for both."""
    path = tmp_path / "blank.jsonl"
    path.write_text('{"prompt": ""}\n{"prompt": "   "}\n{"prompt": "Name a colour."}\n')
    loaded = load_jsonl(path)
    assert [c.messages[0].content for c in loaded.conversations] == ["Name a colour."]
    assert loaded.skipped == (("no user turn with text", 2),)
    (tmp_path / "all-blank.jsonl").write_text('{"prompt": ""}\n{"prompt": " "}\n')
    with pytest.raises(DatasetError, match="no user turn with text"):
        load_jsonl(tmp_path / "all-blank.jsonl")


def test_malformed_jsonl_line_is_refused_with_its_line_number(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"prompt": "fine"}\n\n{"prompt": "broken",\n')
    with pytest.raises(DatasetError, match=r"line 3: not valid JSON"):
        load_jsonl(path)
    path.write_text('{"prompt": "fine"}\n{"text": "no prompt key"}\n')
    with pytest.raises(DatasetError, match=r"line 2: needs a string 'prompt' or a 'messages' list"):
        load_jsonl(path)


def test_empty_and_missing_datasets_are_refused(tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n")
    with pytest.raises(DatasetError, match="the dataset is empty"):
        load_jsonl(empty)
    no_user = tmp_path / "none.json"
    no_user.write_text('[{"conversations": [{"from": "gpt", "value": "hi"}]}]')
    with pytest.raises(DatasetError, match="the dataset is empty"):
        load_sharegpt(no_user)
    with pytest.raises(DatasetError, match="no such dataset file"):
        load_jsonl(tmp_path / "absent.jsonl")


def test_dataset_names_are_checked_when_the_spec_is_read() -> None:
    assert str(parse_ref("sharegpt:  a/b.json")) == "sharegpt: a/b.json"
    for bad, why in (("chat", "unknown dataset"), ("jsonl", "needs a file"), ("random: x", "takes no file")):
        with pytest.raises(SpecError, match=f"workload.dataset.*{why}"):
            parse_spec(demo_data(dataset=bad))
    with pytest.raises(SpecError, match=r"workload.dataset.*empty list"):
        parse_spec(demo_data(dataset=[]))


def test_generated_chat_is_deterministic_and_varied() -> None:
    a, b = generated_chat(40, seed=3), generated_chat(40, seed=3)
    assert a == b and a != generated_chat(40, seed=4)
    assert len({len(c.messages) for c in a}) >= 3  # different numbers of turns
    assert len({c.messages[-1].content for c in a}) >= 20  # different questions
    assert all(c.messages[-1].role is Role.USER and c.answer for c in a)


def test_builtin_tokenizer_is_stable_and_wraps_turns_in_a_template() -> None:
    tok = BuiltinTokenizer(32000)
    messages = generated_chat(1, seed=0)[0].messages
    ids = tok.encode_chat(messages)
    assert ids == tok.encode_chat(messages)
    assert all(0 <= i < 32000 for i in ids)
    assert ids[0] == 1 and ids[-1] == 4  # begin marker, then the assistant's cue
    assert tok.count("Hello, world.") == 4


def test_text_requests_come_from_the_chat_template_with_the_answers_lengths(tmp_path: Path) -> None:
    spec = load_spec(write_spec(tmp_path, dataset=f"jsonl: {FIXTURES / 'code.jsonl'}", num_prompts=8))
    requests = check_workload(spec)
    assert len(requests) == 8 and {r.dataset for r in requests} == {"jsonl-code"}
    assert all(1 <= len(r.input_ids) <= spec.workload.input_len for r in requests)
    lengths = {r.max_new_tokens for r in requests}
    assert 48 in lengths  # max_tokens from the file
    assert spec.workload.output_len in lengths  # no answer, no max_tokens: the spec's output_len
    assert any(r.max_new_tokens < 48 for r in requests)  # the length of the answer in the file


def test_dataset_paths_are_relative_to_the_spec(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "c.json").write_text((FIXTURES / "chat.sharegpt.json").read_text())
    spec = load_spec(write_spec(tmp_path, dataset="sharegpt: data/c.json"))
    assert spec.workload.dataset == f"sharegpt: {tmp_path / 'data' / 'c.json'}"
    assert {r.dataset for r in check_workload(spec)} == {"sharegpt-c"}


def test_weighted_mix_splits_the_prompts_and_interleaves_them(tmp_path: Path) -> None:
    mix = [{"source": "generated-chat", "weight": 0.7}, {"source": "random", "weight": 0.3}]
    spec = load_spec(write_spec(tmp_path, dataset=mix, num_prompts=20))
    requests = build_requests(spec)
    names = [r.dataset for r in requests]
    assert names.count("generated-chat") == 14 and names.count("random") == 6
    assert names[:10].count("random") not in (0, 6)  # mixed through the stage, not in two blocks
    assert spec.workload.dataset_label == "generated-chat 0.7, random 0.3"


def test_bad_datasets_make_the_cli_exit_2_before_ray_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from orchestrator import cli

    def no_run(*args: Any, **kw: Any) -> int:
        raise AssertionError("the sweep started")

    monkeypatch.setattr(cli, "run", no_run)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "ok"}\n{oops}\n')
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    cases = {
        f"jsonl: {tmp_path / 'absent.jsonl'}": "no such dataset file",
        f"jsonl: {bad}": "line 2: not valid JSON",
        f"jsonl: {empty}": "the dataset is empty",
    }
    for dataset, message in cases.items():
        assert cli.main([str(write_spec(tmp_path, dataset=dataset))]) == 2
        err = capsys.readouterr().err
        assert "workload.dataset" in err and message in err


def test_text_dataset_needs_the_models_tokenizer_on_a_real_server(tmp_path: Path) -> None:
    data = demo_data(dataset="generated-chat")
    data.update(backend="sglang", simulated=None)
    data["model"]["path"] = str(tmp_path)  # a model folder without any tokenizer file
    spec = parse_spec(data)
    # Named by the field it was read from (once always workload.dataset, which was not at fault).
    with pytest.raises(SpecError, match=r"^model.path: .* has no tokenizer .*workload.tokenizer"):
        check_workload(spec)
    data["workload"]["dataset"] = "random"  # random ids need no tokenizer
    assert len(check_workload(parse_spec(data))) == data["workload"]["num_prompts"]


def test_breakdown_gives_each_dataset_its_acceptance_and_share() -> None:
    def outcome(tokens: int, verify: int) -> RequestOutcome:
        return RequestOutcome(True, "", 10, tokens, 0.1, 1.0, (0.01,) * (tokens - 1), verify, 0, "length")

    requests = [RequestSpec((1,), 40, "chat"), RequestSpec((2,), 40, "random"), RequestSpec((3,), 40, "chat")]
    outcomes = [outcome(40, 10), outcome(40, 25), outcome(40, 10)]
    per = {m.name: m for m in dataset_breakdown(8, requests, outcomes, 2.0)}
    assert per["chat"].accept_length == pytest.approx(4.0)
    assert per["random"].accept_length == pytest.approx(1.6)
    assert per["chat"].output_tok_per_s == pytest.approx(40.0)
    assert per["random"].output_tok_per_s == pytest.approx(20.0)


def test_a_tokenizer_folder_that_is_not_there_is_named_as_workload_tokenizer(tmp_path: Path) -> None:
    """Seen: `workload.tokenizer: /nonexistent/tok` was refused as "workload.dataset: /nonexistent/tok does
    not exist ...", blaming the dataset the user had right."""
    data = demo_data(dataset=f"jsonl: {FIXTURES / 'code.jsonl'}", tokenizer="/nonexistent/tok")
    with pytest.raises(SpecError, match=r"^workload.tokenizer: /nonexistent/tok does not exist"):
        check_workload(parse_spec(data))


def test_a_jsonl_file_given_as_sharegpt_is_told_its_kind(tmp_path: Path) -> None:
    """Seen: `sharegpt: my_prompts.jsonl` was refused as "not valid JSON (line 2: Extra data)", which
    says nothing of the fix: the file is JSON Lines, given under the other kind."""
    path = tmp_path / "my_prompts.jsonl"
    path.write_text('{"prompt": "Name a colour."}\n{"prompt": "Name a fruit."}\n')
    with pytest.raises(DatasetError, match=rf"one JSON object per line: give it as 'jsonl: {path}'"):
        load_sharegpt(path)
