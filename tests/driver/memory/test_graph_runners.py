"""The CUDA graphs of each runner, predicted from config.json, against what every real H200 log printed.

SGLang prints each graph runner's own figure as it captures (``Capture target verify CUDA graph end ...
mem usage=0.97 GB``): the target's decode or verify graphs, then the draft's decode and extend graphs.
The H200 runs of two shapes (Llama-3-8B and Qwen3-32B with their EAGLE-3 drafts, dummy weights, SGLang
0.5.17) hold 47 such launches, trees s1k1d2 to s8k8d60, graph bs 16 to 256. The per-token costs of
`footprint.graph_costs.graph_costs_for` are fitted on them; before, the 32B's verify graphs of s4k4d16 were
predicted at 0.59 GiB (0.97 real), so what start-up leaves erred by a figure that depended on the tree
(+2.93 GiB read off s1k1d2's log, +2.44 off s4k4d16's) and the s1k1d2 launch's log let the model promise
s4k4d16 at 0.97 a serving peak it did not have.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from orchestrator.driver.loop.node_memory import memory_model_for
from orchestrator.driver.memory.facts import MemoryFacts
from orchestrator.driver.memory.prior import capture_sizes, decode_graphs_gib, left_after_start
from orchestrator.driver.memory.prior_model import PriorMemoryModel
from orchestrator.driver.store.journal import Journal
from orchestrator.engines.sglang.logparse import parse_log
from orchestrator.records import ServerConfig, TrialRecord
from orchestrator.spec.sweep_spec import load_spec

ROOT = Path(__file__).resolve().parents[3]
FIXTURES = ROOT / "tests" / "fixtures" / "sglang" / "0.5.17"
SPECS = {"llama8b": ROOT / "trials/h200-8b.yaml", "qwen32b": ROOT / "trials/h200-32b.yaml"}
RUNNER = re.compile(
    r"Capture (target verify|target decode|draft decode|draft extend) CUDA graph end\. "
    r"elapsed=[\d.]+ s, mem usage=([\d.]+) GB"
)


@dataclass(frozen=True)
class Launch:
    name: str
    shape: str  # a key of SPECS
    config: ServerConfig
    log: str


def _config(log: str) -> ServerConfig:
    report = parse_log(log)
    a = report.args
    assert a is not None and a.mem_fraction_static is not None and a.cuda_graph_max_bs is not None
    return ServerConfig(
        a.mem_fraction_static,
        a.cuda_graph_max_bs,
        a.max_running_requests or a.cuda_graph_max_bs,
        a.speculative_num_steps,
        a.speculative_eagle_topk,
        a.speculative_num_draft_tokens,
    )


def _launches() -> list[Launch]:
    out = []
    for path in sorted(FIXTURES.glob("*/**/*.log")):
        shape = path.relative_to(FIXTURES).parts[0][:7]
        log = path.read_text()
        if shape in SPECS and RUNNER.search(log):
            out.append(Launch(str(path.relative_to(FIXTURES)), shape, _config(log), log))
    return out


LAUNCHES = _launches()


def _facts(shape: str) -> MemoryFacts:
    model, _ = memory_model_for(load_spec(SPECS[shape]), None)
    assert isinstance(model, PriorMemoryModel) and model.facts is not None
    return model.facts


def test_the_fixtures_hold_both_shapes_and_every_kind_of_runner() -> None:
    assert len(LAUNCHES) >= 45
    assert {launch.shape for launch in LAUNCHES} == set(SPECS)
    kinds = {kind for launch in LAUNCHES for kind, _ in RUNNER.findall(launch.log)}
    assert kinds == {"target verify", "target decode", "draft decode", "draft extend"}


@pytest.mark.parametrize("launch", LAUNCHES, ids=[launch.name for launch in LAUNCHES])
def test_each_model_s_graphs_are_predicted_from_its_shape(launch: Launch) -> None:
    """The target's graphs and the draft's (decode and extend together) within 0.07 GiB and 12 % of
    what the log's capture lines printed; both were 40 % under on the Qwen3-32B shape before."""
    printed: dict[str, float] = {kind: float(gb) for kind, gb in RUNNER.findall(launch.log)}
    target = printed.get("target verify", printed.get("target decode", 0.0))
    draft = printed.get("draft decode", 0.0) + printed.get("draft extend", 0.0)
    predicted_target, predicted_draft = decode_graphs_gib(_facts(launch.shape), launch.config)
    checks = [(predicted_target, target, "target")]
    # the draft's extend graphs are captured last: a log without their line ran out of memory capturing
    # them (f98b256s4k2d8), so its draft figure is not the draft's whole
    if "draft extend" in printed or not launch.config.speculative:
        checks.append((predicted_draft, draft, "draft"))
    for predicted, real, which in checks:
        assert abs(predicted - real) <= 0.07 + 0.12 * real, (
            f"{which}: {predicted:.2f} predicted, {real:.2f} real"
        )


def _started(shape: str) -> list[tuple[str, ServerConfig, float]]:
    """(name, configuration, GiB free after start-up) of each speculative launch of the shape whose log
    reads its pools and its end, the measured weights in the facts (as a sweep's model has them)."""
    out = []
    for launch in LAUNCHES:
        report = parse_log(launch.log)
        m = report.memory
        if launch.shape == shape and launch.config.speculative and report.ready and m.avail_end_gb:
            out.append((launch.name, launch.config, m.avail_end_gb))
    return out


def _errors(shape: str) -> dict[str, tuple[ServerConfig, float]]:
    """Per started launch of the shape: its configuration, and what it left after start-up less what the
    prior (with the log's measured weights, as a sweep's model has them) predicted."""
    facts = _facts(shape)
    out = {}
    for name, config, end in _started(shape):
        m = parse_log((FIXTURES / name).read_text()).memory
        assert m.weights_gb is not None and m.draft_weights_gb is not None
        measured = replace(facts, weights_gib=m.weights_gb, draft_weights_gib=m.draft_weights_gb)
        out[name] = (config, end - left_after_start(measured, config))
    return out


def _largest(config: ServerConfig) -> int:
    return max(capture_sizes(config.cuda_graph_max_bs, True, config.max_running_requests))


@pytest.mark.parametrize("shape", sorted(SPECS))
def test_what_start_up_leaves_is_off_by_one_figure_per_shape_and_graph_size_whatever_the_tree(
    shape: str,
) -> None:
    """The prior credits none of what SGLang's allocator gives back before the captures but the draft's
    embedding, so what it predicts is left is low by a figure of the shape (0.8-1.1 GiB on the 8B, 1.5-1.7
    on the 32B) and of the largest captured size, the same for every tree, so that one launch's log
    corrects them all. Among launches of one graph size the spread was 0.80 GiB on the 8B shape (s8k8d60
    against s1k1d2) and 0.62 on the 32B before."""
    errors = _errors(shape)
    assert len(errors) >= 10
    assert min(e for _, e in errors.values()) > 0, "the prior promised more than a launch had"
    by_size: dict[int, list[float]] = {}
    for config, error in errors.values():
        by_size.setdefault(_largest(config), []).append(error)
    # 0.22: SGLang's pool rounds to pages and prints GB to two decimals; s4k4d8 and s4k4d16 at 0.97 on the
    # 32B shape came out 0.13 GiB above their neighbours at 0.96 and 0.98
    for size, figures in by_size.items():
        assert max(figures) - min(figures) <= 0.22, (size, sorted(figures))


@pytest.mark.parametrize("shape", sorted(SPECS))
def test_a_correction_read_off_one_launch_promises_no_other_launch_more_than_the_margin(shape: str) -> None:
    """The model moves its prior by the error read off a launch that started (`left_after_start`), less
    the allocator's credit per unit of graph size for a configuration with smaller graphs. Read off any
    one launch of the shape, it promises every other launch at most 0.22 GiB more than that launch had,
    inside the prior's 0.25 GiB graph margin; carried whole from a bs-256 launch to a bs-16 one it
    promised 0.33 GiB more."""
    per_bs = _facts(shape).graphs.credit_gib_per_bs
    errors = _errors(shape)
    worst = 0.0
    for ref, ref_error in errors.values():
        for config, error in errors.values():
            carried = ref_error - per_bs * max(0, _largest(ref) - _largest(config))
            worst = max(worst, carried - error)
    assert worst <= 0.22, worst


def _record(folder: str, number: int) -> TrialRecord:
    (record,) = Journal(FIXTURES / folder / "records").read([number])
    return record


def test_after_the_smallest_tree_s_launch_the_32b_shape_s_serving_boundaries_are_predicted_as_measured() -> (
    None
):
    """Given only s1k1d2's launch at 0.98 (qwen32b-serving trial 3), the model decides the five other
    launches of these trees at concurrency 32 as they went: s4k4d16 runs out of memory under load at 0.98
    and at 0.97 (the old model said it served at 0.97: 5.30 GiB predicted free, 4.81 real, 5.22 needed)
    and serves at 0.96; s4k4d8 runs out at 0.98 and serves at 0.97. Each within 0.2 GiB of what its own
    log then showed."""
    model, _ = memory_model_for(load_spec(SPECS["qwen32b"]), None)
    assert isinstance(model, PriorMemoryModel)
    first = _record("qwen32b-serving", 3)
    model.observe(first.number, first.result)
    cases = [("qwen32b-serving", n) for n in (0, 1, 2)] + [("qwen32b-serving-2", n) for n in (0, 1)]
    for folder, number in cases:
        record = _record(folder, number)
        config, real = record.result.config, record.result.memory.avail_end_gb
        left = model.left_after_start(config)
        assert left is not None and real is not None
        assert abs(left - real) <= 0.2, f"{folder}-{number}: {left:.2f} predicted, {real:.2f} real"
        served = record.result.status.value == "ok"
        assert model.predict(config).skip is not served, f"{folder}-{number}"


def test_the_baseline_s_launch_does_not_make_the_prior_promise_trees_more_than_they_had() -> None:
    """The server without speculation's graphs took 0.3 of the prior's figure (the tiny model's set-up is
    mostly not spent on the H200 shapes); read as a scale of every graph cost it made the model promise
    the 8B shape's s4k4d16 at 0.97 0.34 GiB more than it had. After the baseline alone every tree's
    prediction stays at or below what its launch really left."""
    for shape, baseline in (("llama8b", ("llama8b-trees", 0)), ("qwen32b", ("qwen32b-sweep", 0))):
        model, _ = memory_model_for(load_spec(SPECS[shape]), None)
        assert isinstance(model, PriorMemoryModel)
        first = _record(*baseline)
        assert not first.result.config.speculative
        model.observe(first.number, first.result)
        assert model.graph_scale is None
        for name, config, end in _started(shape):
            left = model.left_after_start(config)
            assert left is not None and left <= end + 0.02, f"{name}: {left:.2f} predicted, {end:.2f} real"
