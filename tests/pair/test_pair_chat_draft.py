"""The pair's second draft, trained on the chat corpus, measured on one H100: the product's records read back.

`tests/fixtures/sglang/0.5.17/smollm2-chat-h100/` holds the draft's training and held-out figures and the
launches of `trials/smollm2-h200-grid.yaml` with it (the server without speculation and 16 trees,
with the confirmation's repeats), beside `smollm2-grid/`, the first draft's (templates only) launches on
an H200. Accept lengths of greedy decoding do not depend on the card, so the two drafts compare on the
same tree.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from orchestrator.config.draft_tree import DraftTree
from orchestrator.driver.answer.confirm import machine
from orchestrator.driver.memory.prior import estimate
from orchestrator.engines.engine import read_all
from orchestrator.engines.sglang.engine import SGLANG
from orchestrator.records import TrialRecord, TrialStatus
from tests.driver.memory.h200_fixtures import study_records
from tests.pair.pair_prior import pair_prior

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "sglang" / "0.5.17"
CHAT, TEMPLATES = FIXTURES / "smollm2-chat-h100", FIXTURES / "smollm2-grid"
H100_MIB = 81559.0


def _records(folder: Path) -> list[TrialRecord]:
    return sorted(study_records(folder), key=lambda r: r.number)


def _accept(folder: Path, label: str) -> float:
    record = next(r for r in _records(folder) if (t := DraftTree.of(r.result.config)) and t.label() == label)
    assert record.result.server_accept_length is not None
    return record.result.server_accept_length


def test_both_logs_are_servers_that_started_and_the_tree_served_the_trained_draft() -> None:
    for record in _records(CHAT):
        text = (CHAT / "trials" / f"{record.number:04d}" / "server.log").read_text()
        report = read_all(SGLANG.log_parser(), text).report()
        assert report.ready and report.failure is None and record.result.status is TrialStatus.OK
        assert ("type=LlamaForCausalLMEagle3" in text) == record.result.config.speculative


def test_the_chat_corpus_draft_is_accepted_more_than_the_template_draft_on_the_same_tree() -> None:
    chat, templates = _accept(CHAT, "s1k1d2"), _accept(TEMPLATES, "s1k1d2")
    assert chat > templates + 0.08, (chat, templates)  # 1.41 against 1.29


def test_the_cpu_check_on_mt_bench_foretold_what_sglang_accepted_at_one_step() -> None:
    """One draft step accepts 1 + p0 tokens a verify, p0 the draft's step-0 accuracy on the served
    workload: the node's CPU check (`tools.pair.eval_draft`, fp32) against SGLang's bf16 serving."""
    scored = json.loads((CHAT / "draft" / "mt_bench_eval.json").read_text())
    assert scored["sequences"] == 80
    predicted = 1 + scored["step_accuracy"][0]
    assert abs(predicted - _accept(CHAT, "s1k1d2")) < 0.08, predicted
    summary = json.loads((CHAT / "draft" / "train_summary.json").read_text())
    held_out_training = summary["epochs"][-1]["eval_step_accuracy"][0]
    assert held_out_training > scored["step_accuracy"][0] + 0.1  # the gap to chat traffic narrowed, not gone


def test_acceptance_rises_with_depth_and_width_and_does_not_depend_on_concurrency() -> None:
    """SGLang's accept length on the held-out workload, tree by tree: a deeper chain and a wider first
    step each accept more (1.41, 1.56, 1.62 on one to four steps at top-k 1; 1.52, 1.60, 1.67 at two,
    four and eight candidates for one step), with diminishing steps as the draft's later-step accuracy
    falls; the widest deep trees pass 2.0 (s4k4d16, s6k4d16). Greedy acceptance is a property of the
    draft on the workload, so the three concurrency levels of one launch agree within 3 % (the largest
    spread, s6k8d16's 2.08-2.13, is 2.4 %: batched numerics move a few near ties, and the widest trees
    are the ones with most near ties to move)."""
    chain = [_accept(CHAT, label) for label in ("s1k1d2", "s2k1d3", "s4k1d5")]
    assert chain == sorted(chain) and chain[1] - chain[0] > chain[2] - chain[1] > 0, chain
    width = [_accept(CHAT, label) for label in ("s1k1d2", "s1k2d3", "s1k4d5", "s1k8d9")]
    assert width == sorted(width) and width[1] > width[0] + 0.05, width
    for steps in (2, 4):
        assert _accept(CHAT, f"s{steps}k2d{2 * steps + 1}") > _accept(CHAT, f"s{steps}k1d{steps + 1}") + 0.1
    assert min(_accept(CHAT, "s4k4d16"), _accept(CHAT, "s6k4d16")) > 2.0
    for record in _records(CHAT):
        levels = [s.accept_length for s in record.result.stages if s.accept_length is not None]
        assert not record.result.config.speculative or len(levels) == 3
        assert not levels or max(levels) - min(levels) < 0.03 * max(levels), (record.number, levels)


def test_on_one_machine_no_tree_pays_and_chains_lose_most() -> None:
    """The 135M target's decode step is so cheap that a verify costs more than the tokens it gains. The
    grid's launches ran on five H100 machines, and the same server without speculation measured 47-58 %
    more on the fifth than on the first: only launches on one machine compare. On each machine the
    baseline ran on, every tree is slower at every level: top-k 1 chains by more than a quarter (s1k1d2
    on the first, 47 % below; s6k1d7 twice on the fifth, 28-33 % below), and the best of the wide trees
    on the fifth still by 20-23 % (s4k8d16 at 1 and 8 concurrent, s6k4d16 at 32)."""
    records = _records(CHAT)
    on: dict[str, list[TrialRecord]] = {}
    for record in records:
        on.setdefault(machine(record), []).append(record)
    compared = 0
    for launches in on.values():
        bases = [r for r in launches if not r.result.config.speculative]
        if not bases:
            continue
        figures = [(s.concurrency, s.output_tok_per_s) for b in bases for s in b.result.stages]
        plain = {c: statistics.median(v for level, v in figures if level == c) for c in (1, 8, 32)}
        best = dict.fromkeys(plain, 0.0)
        for record in launches:
            tree = DraftTree.of(record.result.config)
            for stage in record.result.stages if tree else ():
                compared += 1
                best[stage.concurrency] = max(best[stage.concurrency], stage.output_tok_per_s)
                if tree is not None and tree.topk == 1:
                    assert stage.output_tok_per_s < 0.75 * plain[stage.concurrency], (record.number, stage)
        assert all(best[c] < 0.85 * plain[c] for c in plain), (best, plain)
    assert compared >= 3 * 7  # node 1's chain, node 5's eight tree launches


def test_the_draft_was_trained_on_the_chat_mix() -> None:
    made = json.loads((CHAT / "draft" / "selfdistill.json").read_text())
    assert made["prompt_mix"] == "chat" and made["train_prompts"] == 12000
    assert made["deterministic_inference"] is True


def test_the_prior_predicted_the_h100_pools_once_the_first_launch_told_the_card() -> None:
    """The spec states an H200's memory; the first launch tells the H100's (its GPU check) and corrects
    the prior with what it measured. From then on the prior predicts both launches' KV pools within
    0.02 %, as it did on the H200. With the H100's total alone it errs by 0.15 % (4,655 tokens, on the
    safe side): an idle H100 holds 480 MiB where the prior's default, an H200's, is ~615."""
    prior = pair_prior(ROOT / "trials" / "smollm2-h200-grid.yaml")
    records = _records(CHAT)
    prior.observe(records[0].number, records[0].result)
    assert prior.facts is not None and prior.facts.gpu_total_mib == H100_MIB
    for record in records:
        measured = record.result.memory.kv_cache_tokens
        assert measured is not None
        predicted = estimate(prior.facts, record.result.config).kv_tokens
        assert abs(predicted - measured) <= 0.0002 * measured, (predicted, measured)


def test_the_speculation_model_predicts_each_measured_tree_from_the_others() -> None:
    """The policy's acceptance model on the chat draft's trees as the product's sweep measured them (each
    launch one sample, SGLang's own accept length): each left out and predicted from the rest. All 16 trees
    (steps 1-6, top-k 1-8, 2-16 draft tokens), 19 launches (three trees launched twice): 1.6 % mean miss,
    3.6 % at worst (s6k2d13), with the verified-nodes form the model chooses once wide trees are measured
    (per-position: 2.4 % mean, 7.5 % at worst). With twelve trees it missed by 0.8 % mean, 2.5 % at worst
    (s6k4d16); with four narrow trees it chose the per-position form, 0.8 % too. Goal: at most 2 % mean.
    """
    from orchestrator.driver.speculation.spec_model import acceptance_loo, choose_form

    samples = [
        (tree, r.result.server_accept_length)
        for r in _records(CHAT)
        if (tree := DraftTree.of(r.result.config)) is not None and r.result.server_accept_length is not None
    ]
    assert len(samples) >= 12
    loo = [abs(e) for e in acceptance_loo(samples, choose_form(samples))]
    assert sum(loo) / len(loo) <= 0.02 and max(loo) <= 0.05, loo
