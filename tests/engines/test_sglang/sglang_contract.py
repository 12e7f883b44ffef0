"""SGLang's engine in the engines' contract, on what real SGLang servers printed and answered (0.5.17 on
an H200, 0.5.14's port clash: `tests/fixtures/sglang/`). No SGLang server runs here, so the live part of
the contract is the simulated node's (`tests/sim/sim_contract.py`), which serves SGLang's API."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from orchestrator.engines import engine_for
from orchestrator.records import FailureKind, FailureStage
from orchestrator.spec.engine_catalog import EngineName
from orchestrator.spec.search import make_config
from orchestrator.spec.sweep_spec import parse_spec
from tests.engines.contract import EngineCase, Exchange, FailureCase

ROOT = Path(__file__).resolve().parents[3]
FIXTURES = ROOT / "tests" / "fixtures" / "sglang"
READY = "The server is fired up and ready to roll!"


def recorded(name: str) -> FailureCase:
    version, log, stage, kind = {
        "kv-oom": ("0.5.17", "kv-oom.log", FailureStage.KV_ALLOCATION, FailureKind.OOM),
        "graph-oom": ("0.5.17", "graph-oom.log", FailureStage.TARGET_GRAPH_CAPTURE, FailureKind.OOM),
        "scheduler-killed": ("0.5.17", "scheduler-killed.log", FailureStage.KV_ALLOCATION, FailureKind.CRASH),
        "port-in-use": ("0.5.14", "port-in-use.log", FailureStage.WARMUP, FailureKind.PORT_IN_USE),
    }[name]
    text = (FIXTURES / version / log).read_text()
    return FailureCase(name, stage, kind, lambda _: text)


def exchange() -> Exchange:
    """`POST /generate` of the `ok` run, streamed and not (`generate.json`), and `/get_server_info` after."""
    ok = json.loads((FIXTURES / "0.5.17" / "generate.json").read_text())["ok"]
    stream, whole = ok["stream"], ok["non_stream"]
    body = stream["request_body"]
    # Not streamed is SGLang's default: the client leaves the key out.
    greedy: dict[str, Any] = {k: v for k, v in whole["request_body"].items() if k != "stream"}
    lines = tuple(b"data: " + json.dumps(stream[c]).encode() for c in ("first_chunk", "last_chunk"))
    return Exchange(
        input_ids=tuple(body["input_ids"]),
        max_new_tokens=body["sampling_params"]["max_new_tokens"],
        stream_lines=(*lines, b"data: [DONE]"),
        greedy_answer=whole["response"],
        server_info=json.loads((FIXTURES / "0.5.17" / "server-info.json").read_text()),
        stream_request=body,
        greedy_request=greedy,
        greedy_input_ids=tuple(greedy["input_ids"]),
    )


def contract_case() -> EngineCase:
    data = yaml.safe_load((ROOT / "trials" / "demo.yaml").read_text())
    data.update(backend="real")
    data.pop("simulated")
    data["node"]["gpus"] = 1
    data["model"].update(path="/models/tiny-llama", draft_path="/models/tiny-llama-eagle3", check_paths=False)
    return EngineCase(
        name="sglang",
        engine=engine_for(EngineName.SGLANG),
        spec=parse_spec(data, "sglang.yaml"),
        config=make_config(0.85, 16, 16, 3, 1, 4),  # ok.log's own flags
        version="0.5.17",
        module="sglang.launch_server",
        ready_marker=READY,
        failures=tuple(recorded(n) for n in ("kv-oom", "graph-oom", "scheduler-killed", "port-in-use")),
        ok_log=(FIXTURES / "0.5.17" / "ok.log").read_text(),
        exchange=exchange(),
        no_live="no SGLang server runs here (it needs SGLang and a GPU); the simulated node serves its API",
    )
