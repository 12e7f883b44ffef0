"""The pair again, on a second fresh H100 a day later: the draft retrained from its seed, then the product's
sweep of `trials/smollm2-h200.yaml` begun on it (four launches of its ten).

`smollm2-chat-h100/draft-again/` holds that run's hashes and figures, `smollm2-sweep-h100-b/` the sweep's
records, logs, console, best.json and report (plotly.js left out). What a draft is (its answers, its
weights, what it accepts) is the seed's; how fast a server runs is the machine's.
"""

from __future__ import annotations

import json
from pathlib import Path

from orchestrator.driver.answer.conclusion import sweep_answer
from orchestrator.driver.answer.confirm import machine
from orchestrator.engines.engine import read_all
from orchestrator.engines.sglang.engine import SGLANG
from orchestrator.records import FailureKind, TrialStatus
from tests.pair.test_pair_sweep import _records

FIXTURES = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "sglang" / "0.5.17"
FIRST, AGAIN = FIXTURES / "smollm2-chat-h100" / "draft", FIXTURES / "smollm2-chat-h100" / "draft-again"
SWEEP, SWEEP_B = FIXTURES / "smollm2-sweep-h100", FIXTURES / "smollm2-sweep-h100-b"
TIMINGS = {"server_ready_s", "generate_s"}


def _json(path: Path) -> dict[str, object]:
    loaded = json.loads(path.read_text())
    assert isinstance(loaded, dict)
    return loaded


def test_the_seed_gives_the_same_answers_and_the_same_draft_on_another_node() -> None:
    # Batch-invariant decoding and deterministic training: byte for byte, so a grid measured over
    # several sessions holds one draft, and a draft lost between sessions is made again.
    assert (AGAIN / "hashes.txt").read_text() == (FIRST / "hashes.txt").read_text()
    first, again = _json(FIRST / "selfdistill.json"), _json(AGAIN / "selfdistill.json")
    assert {k: v for k, v in first.items() if k not in TIMINGS} == {
        k: v for k, v in again.items() if k not in TIMINGS
    }
    for name in ("mt_bench_eval.json", "conversion_check.json"):
        assert _json(AGAIN / name) == _json(FIRST / name), name
    assert "check: PASS" in (AGAIN / "pipeline.txt").read_text()


def test_the_second_sweep_served_every_launch_on_one_machine_with_no_oom() -> None:
    records = _records(SWEEP_B)
    assert [r.number for r in records] == [0, 1, 2, 3]
    assert all(r.result.status is TrialStatus.OK for r in records)
    assert not [r for r in records if r.result.failure and r.result.failure.kind is FailureKind.OOM]
    assert len({machine(r) for r in records}) == 1
    assert machine(records[0]) != machine(_records(SWEEP)[0])  # another H100 than the first sweep's
    for r in records:
        text = (SWEEP_B / "trials" / f"{r.number:04d}" / "server.log").read_text()
        report = read_all(SGLANG.log_parser(), text).report()
        assert report.ready and report.failure is None
        assert ("type=LlamaForCausalLMEagle3" in text) == r.result.config.speculative


def test_the_same_seed_draws_the_same_trees_and_spends_no_launch_on_a_moot_relaunch() -> None:
    first = [r.result.config.label() for r in _records(SWEEP)]
    again = [r.result.config.label() for r in _records(SWEEP_B)]
    # The first sweep's third launch relaunched its second (since mended): this one goes on searching.
    assert again == [first[0], first[1], first[3], first[4]]


def test_acceptance_is_the_drafts_and_throughput_the_machines() -> None:
    first = {r.result.config.label(): r for r in _records(SWEEP)}
    again = {r.result.config.label(): r for r in _records(SWEEP_B)}
    shared = [label for label in again if label in first and again[label].result.config.speculative]
    assert len(shared) == 3
    for label in shared:
        a, b = first[label].result.server_accept_length, again[label].result.server_accept_length
        assert a is not None and b is not None and abs(a / b - 1) < 0.02, (label, a, b)
    # The same server without speculation on two H100s: a third apart at concurrency 32, and the other
    # way round at concurrency 1; one launch's noise on one machine is a few percent.
    (base_a,) = [r for r in _records(SWEEP) if r.baseline]
    (base_b,) = [r for r in _records(SWEEP_B) if r.baseline]
    at = {
        (which, s.concurrency): s.output_tok_per_s
        for which, r in (("a", base_a), ("b", base_b))
        for s in r.result.stages
    }
    assert at[("a", 32)] / at[("b", 32)] > 1.3 and at[("b", 1)] / at[("a", 1)] > 1.3


def test_its_answer_so_far_is_best_json_serve_without_speculation() -> None:
    answer = sweep_answer(_records(SWEEP_B))
    best = _json(SWEEP_B / "best.json")
    assert answer is not None and answer.nospec and best["nospec"]
    assert round(answer.median, 1) == round(float(str(best["median_tok_per_s"])), 1) == 5159.2
    assert best["runtime_policy"] == {"speculation": "off", "measured": True}
    assert "best: serve without speculation: trial 0, 5159.2 tok/s" in (SWEEP_B / "console.txt").read_text()
