"""The ShareGPT file `sglang.bench_serving --dataset-name sharegpt` reads, read as it reads it.

`ShareGPT_V3_unfiltered_cleaned_split.json` names its assistant chatgpt, bard and bing as well as gpt,
its user user as well as human, and holds empty conversations and split ones that start with the
answer; the fixture is a few items of that shape. A real tokenizer's notices (transformers' "PyTorch was
not found" and its sequence-length warning for a prompt the benchmark cuts anyway) go to the log.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestrator.bench.textdata import Role, load_sharegpt
from orchestrator.bench.traffic import build_requests, check_workload, workload_lines
from orchestrator.spec.sweep_spec import load_spec

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "tests" / "fixtures" / "datasets" / "ShareGPT_V3_sample.json"


def write_spec(tmp_path: Path, **workload: Any) -> Path:
    data = yaml.safe_load((REPO / "trials" / "demo.yaml").read_text())
    data["workload"].update(workload)
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_every_speaker_of_the_real_file_is_read_and_what_cannot_be_used_is_counted() -> None:
    speakers = {t["from"] for item in json.loads(SAMPLE.read_text()) for t in item["conversations"]}
    assert {"human", "gpt", "system", "user", "chatgpt", "bard", "bing"} <= speakers
    loaded = load_sharegpt(SAMPLE)
    assert len(loaded.conversations) == 8
    assert loaded.summary() == (
        "8 conversations, 5 skipped (2 no user turn with text, 1 a turn without text, "
        "1 empty conversation, 1 unknown speaker 'narrator')"
    )
    by_first = {c.messages[-1].content.split()[0]: c for c in loaded.conversations}
    assert by_first["Write"].answer is not None and by_first["Write"].answer.startswith("Frost")  # chatgpt
    assert by_first["What"].answer is not None  # bard
    bing = by_first["How"]  # two human turns answered by bing
    assert [m.role for m in bing.messages] == [Role.USER, Role.ASSISTANT, Role.USER]
    assert by_first["Explain"].messages[0].role is Role.USER  # `user`
    assert [m.role for m in by_first["Convert"].messages] == [Role.SYSTEM, Role.USER]


def test_a_split_conversation_starts_at_its_first_question_and_a_speakers_turns_are_joined() -> None:
    loaded = load_sharegpt(SAMPLE)
    reply = next(c for c in loaded.conversations if "declining" in c.messages[-1].content)
    assert [m.role for m in reply.messages] == [Role.USER]  # the leading answer is dropped
    sourdough = next(c for c in loaded.conversations if "sourdough" in c.messages[0].content)
    assert len(sourdough.messages) == 1 and "nail polish" in sourdough.messages[0].content


def test_the_console_names_the_dataset_and_its_kept_and_skipped_counts(tmp_path: Path) -> None:
    spec = load_spec(write_spec(tmp_path, dataset=f"sharegpt: {SAMPLE}", num_prompts=12))
    assert len(check_workload(spec)) == 12
    assert workload_lines(spec) == [
        "dataset sharegpt: ShareGPT_V3_sample.json: 12 requests from 8 conversations, 5 skipped (2 no user "
        "turn with text, 1 a turn without text, 1 empty conversation, 1 unknown speaker 'narrator')"
    ]
    mix = [{"source": f"sharegpt: {SAMPLE}", "weight": 1}, {"source": "random", "weight": 1}]
    spec = load_spec(write_spec(tmp_path, dataset=mix, num_prompts=12))
    assert workload_lines(spec)[1] == "dataset random: 6 requests"


def _tiny_tokenizer(folder: Path) -> Path:
    pytest.importorskip("tokenizers")
    pytest.importorskip("transformers")
    from tests.test_make_weights import mw

    folder.mkdir()
    assert mw.write_tokenizer([folder], vocab_size=32000)
    return folder


@pytest.mark.slow  # a fresh process that imports transformers
def test_transformers_notices_go_to_the_log_not_the_console(tmp_path: Path) -> None:
    model = _tiny_tokenizer(tmp_path / "tiny")
    long = tmp_path / "long.json"
    text = " ".join(f"word{i}" for i in range(6000))  # more tokens than the tokenizer's 4096
    long.write_text(json.dumps([{"conversations": [{"from": "human", "value": text}]}]))
    data = yaml.safe_load((REPO / "trials" / "demo.yaml").read_text())
    data["workload"].update(dataset=f"sharegpt: {long}", tokenizer=str(model), num_prompts=2)
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(yaml.safe_dump(data))
    script = (
        "import logging, sys\n"
        "from orchestrator.bench.traffic import check_workload\n"
        "from orchestrator.spec.sweep_spec import load_spec\n"
        "if sys.argv[2] == '-v':\n"
        "    logging.basicConfig(level=logging.INFO, stream=sys.stdout, format='%(name)s: %(message)s')\n"
        "else:\n"
        "    logging.basicConfig(level=logging.WARNING)\n"
        "requests = check_workload(load_spec(sys.argv[1]))\n"
        "print('input', max(len(r.input_ids) for r in requests))\n"
    )
    quiet = subprocess.run(
        [sys.executable, "-c", script, str(spec_path), "-"],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=True,
        # Under CI=true transformers also hands its records to the root logger: the harder case.
        env={**os.environ, "CI": "true"},
    )
    assert quiet.stderr == "" and quiet.stdout == f"input {data['workload']['input_len']}\n"
    verbose = subprocess.run(
        [sys.executable, "-c", script, str(spec_path), "-v"],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=True,
    )
    assert verbose.stderr == ""
    assert "orchestrator.bench.tokenizer: transformers: Token indices sequence length" in verbose.stdout
    try:
        import torch  # noqa: F401
    except ImportError:
        assert "transformers: PyTorch was not found" in verbose.stdout


@pytest.mark.slow  # seconds of real time (a simulated server, a sweep or a wait); left out of `make unit`
def test_a_conversation_the_chat_template_refuses_is_skipped_and_counted(tmp_path: Path) -> None:
    model = _tiny_tokenizer(tmp_path / "strict")
    config_path = model / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    # As Mistral's and Gemma's templates do for what they cannot render.
    config["chat_template"] = (
        "{% for m in messages %}{% if m['role'] == 'system' %}"
        "{{ raise_exception('System role not supported') }}{% endif %}{% endfor %}" + config["chat_template"]
    )
    config_path.write_text(json.dumps(config))
    data = yaml.safe_load((REPO / "trials" / "demo.yaml").read_text())
    data["workload"].update(dataset=f"sharegpt: {SAMPLE}", tokenizer=str(model), num_prompts=16)
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(yaml.safe_dump(data))
    spec = load_spec(spec_path)
    assert len(build_requests(spec)) == 16
    (line,) = workload_lines(spec)
    assert "16 requests from 7 conversations, 6 skipped" in line and "1 refused by the chat template" in line
