"""A sweep spec for the toy engine, and the node that runs it here: the toy's server on this machine,
whose GPU check sees no GPU in use (the toy needs none)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from orchestrator.gpu import GpuSample
from orchestrator.node.backends import RealNode
from orchestrator.spec.sweep_spec import SweepSpec, parse_spec
from tests.engines.toy.toy_engine import FOLDER

DEMO = Path(__file__).resolve().parents[3] / "trials" / "demo.yaml"


def toy_data(*flags: str) -> dict[str, Any]:
    data = yaml.safe_load(DEMO.read_text())
    data.update(name="toy", engine="toy", backend="real", sampler_seed=0)
    data.pop("simulated")
    data["node"]["gpus"] = 1
    data["model"].update(path="/toy/model", draft_path="/toy/draft", check_paths=False)
    # The server runs with this folder alone on its path: the toy's module is found there.
    data["server"] = {"flags": ["--toy-greeting", "hello", *flags], "env": {"PYTHONPATH": str(FOLDER)}}
    data["workload"].update(num_prompts=4, input_len=16, output_len=8, concurrency=[2, 4], warmup_prompts=1)
    data["budget"].update(baseline=False)
    # The toy searches its fraction and its batch alone (`TOY_SPACE`): the rest of the section holds one
    # value, that of the known-good configuration.
    data["search"].update(
        cuda_graph_max_bs={"choices": [512]},
        speculative_num_steps={"choices": [3]},
        speculative_eagle_topk={"choices": [1]},
        speculative_num_draft_tokens={"choices": [4]},
    )
    data["timeouts"].update(startup_s=30, benchmark_s=30, gpu_clean_s=1, stop_s=5)
    return data


def toy_spec(*flags: str) -> SweepSpec:
    return parse_spec(toy_data(*flags), "toy.yaml")


class NoGpus:
    """The toy needs no GPU: the node's GPU check sees none in use."""

    def snapshot(self) -> tuple[GpuSample, ...]:
        return ()


class ToyNode(RealNode):
    def probe(self) -> NoGpus:
        return NoGpus()
