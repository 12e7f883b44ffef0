"""The product's proposal policy: a search that knows the problem, in front of Optuna.

Why a policy in front of Optuna rather than a custom sampler: the policy decides whole configurations from
what the trials measured (accept lengths and tok/s per stage, the memory model's verdicts), while a
`BaseSampler` is asked one parameter at a time through Optuna's relative/independent split and sees only
params and values. So the policy enqueues its proposal (`study.enqueue_trial`) and the trial is asked and
told as every other: Optuna stays the ask/tell store, the constraint memory (an OOM is told as infeasible),
the journal of what ran and what --resume reads back; the policy keeps no state of its own (it is
recomputed from the sweep's records on every call, so a resumed sweep goes on where it was). When the
policy has nothing to propose, TPE proposes as before.

What it proposes, in order (each call, from the records):

1. **Structure first** (`proposal.structure`): every tree is launched with memory flags that cannot
   throttle the highest concurrency level, at the highest fraction the memory model says fits.
2. **Coverage**: `MIN_TREES` spread-out trees (the classic chain first, then each the farthest from those
   tried), so the model sees different depths and widths.
3. **The model** (`speculation.spec_model`): fitted on the measured trees; every untried tree's objective is
   predicted with an uncertainty: the model's leave-one-out error against measured launches (never a
   guess: until a tree can be left out, coverage goes on), larger off the measured region, with the
   leader's launch noise added once the study has measured it. A tree whose 95 % upper bound does not
   reach the leader is ruled out.
   Of the trees not ruled out, the one with the largest expected gain over the leader is launched. A
   large error is in that belief already (it widens every tree's spread, so it rules little out); it does
   not switch the measurements off. Launching the tree farthest from those tried while the error was
   above 4 % made the search a fixed design wherever the error never got there: the real pair's eight
   trees of one H100 miss by 34 %, and in an 8-launch budget its five searches were the same five trees
   in every run, none of the two within 2 % of the best.
   A space of fewer trees than the model needs (`MIN_TREES`) has no fit: once each tree is launched, the
   leader's tree is launched at the memory flags that cover the workload's highest concurrency, the
   farthest from those tried first, before the sampler is asked (`memory_flags`).
4. **Around the leader**: the adaptive-speculation modes the space searches, on the leader's tree; wider
   memory flags only when the leader's stages show a throttle (retractions, or no gain from the last level).
5. **Race**: while the leader is too close to call against a configuration (`answer.judge`, with the
   calibrated noise), the least-launched of those is launched again, up to `race_launches` each. The
   server without speculation races too while it is within the noise of the leader (`baseline_rival`);
   its repeats, unlike its first launch, are paid from the budget. A space of one or two trees races
   once every memory flag is launched.
6. **Stop**: when the leader is clearly ahead (or the race is run) and no untried tree can beat it, the
   answer is known: the sweep ends early and gives the rest of the budget back.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from orchestrator.config.adaptive import AdaptiveMode
from orchestrator.config.draft_tree import DraftTree
from orchestrator.driver.answer.choose import (
    Answer,
    Call,
    Verdict,
    answer_launches,
    baseline_launches,
    choose_answer,
)
from orchestrator.driver.answer.conclusion import confirmation_moot
from orchestrator.driver.answer.groups import Launch, group_launches
from orchestrator.driver.answer.noise import NoiseSource
from orchestrator.driver.memory.learned import MemoryModel
from orchestrator.driver.proposal.memory_flags import covering_flags
from orchestrator.driver.proposal.prospects import predict_prospects, spread
from orchestrator.driver.proposal.structure import Structure, choose_structure, fitting_config
from orchestrator.driver.proposal.trees import dim_values, trees_of
from orchestrator.driver.speculation.predictions import model_predictions, stage_samples
from orchestrator.driver.speculation.spec_model import MIN_TREES, SpecModel, fit
from orchestrator.driver.store.trial_attrs import TrialAttr
from orchestrator.records import ServerConfig, TrialRecord, TrialStatus
from orchestrator.spec import engine_catalog
from orchestrator.spec.search import make_config
from orchestrator.spec.sweep_spec import SweepSpec

log = logging.getLogger(__name__)

# The race: the leader and the one configuration within the noise that the model ranks highest. On the
# development cases under overhead-bound noise racing 2 was right in 60 % of runs, 4 in 51 %, 6 in 44 %.
RACE_TOP = 2
THROTTLE_GAIN = 0.02
# A race still too close once its noise is below this is over: what is left apart is less than the 2 %
# a user can tell, so more launches buy nothing (on a GPU-bound node that is after 2-3 launches each).
CLOSE_ENOUGH = 0.02  # the top level must beat the one below by this much, else the flags may throttle it


class Action(StrEnum):
    PROPOSE = "propose"
    STOP = "stop"
    PASS = "pass"  # nothing to propose: the sampler proposes


@dataclass(frozen=True)
class Decision:
    action: Action
    config: ServerConfig | None = None
    attrs: dict[str, Any] = field(default_factory=dict)
    why: str = ""


class ProposalPolicy:
    """What to launch next for one sweep (see the module's docstring)."""

    def __init__(self, spec: SweepSpec, race_launches: int | None = None) -> None:
        self.spec = spec
        self.structure: Structure = choose_structure(spec.search, spec.workload.concurrency)
        # what was launched is known by the server the engine makes of it, whatever name it ran under
        self.server_of = engine_catalog.server_of(spec.engine)
        self.trees = trees_of(spec.search)
        self.race_launches = race_launches or max(2, spec.budget.confirm_repeats)
        steps = [t.steps for t in self.trees] or [1]
        topks = [t.topk for t in self.trees] or [1]
        drafts = [t.draft_tokens for t in self.trees] or [2]
        self._scale = (float(max(steps)), max(1.0, math.log2(max(topks))), float(max(drafts)))

    # -- what has been launched -------------------------------------------------------------------

    @staticmethod
    def _tried(records: Sequence[TrialRecord], pending: Collection[ServerConfig]) -> set[DraftTree]:
        """Trees with a measurement, or in flight; a tree whose launches all failed counts after two."""
        failed: dict[DraftTree, int] = {}
        tried: set[DraftTree] = set()
        for r in records:
            tree = DraftTree.of(r.result.config)
            if tree is None or r.result.config.speculative_adaptive:
                continue
            if r.result.status is TrialStatus.OK:
                tried.add(tree)
            elif r.result.node_id:  # launched (a predicted OOM never ran)
                failed[tree] = failed.get(tree, 0) + 1
        tried |= {t for t, n in failed.items() if n >= 2}
        tried |= {t for c in pending if (t := DraftTree.of(c)) is not None}
        return tried

    def _config(
        self,
        tree: DraftTree,
        model: MemoryModel,
        launched: Collection[ServerConfig],
        served: Collection[float],
    ) -> ServerConfig | None:
        config = fitting_config(self.structure, tree, model, served)
        return None if config is None or self.server_of(config) in launched else config

    # -- the decision ---------------------------------------------------------------------------------

    def decide(
        self,
        records: Sequence[TrialRecord],
        pending: Collection[ServerConfig],
        model: MemoryModel,
        lossy: Collection[int] = (),
    ) -> Decision:
        launched = {
            self.server_of(c) for c in [*(r.result.config for r in records if r.result.node_id), *pending]
        }
        tried = self._tried(records, pending)
        open_trees = [t for t in self.trees if t not in tried]
        served = {r.result.config.mem_fraction_static for r in records if r.result.status is TrialStatus.OK}
        candidates = {t: c for t in open_trees if (c := self._config(t, model, launched, served)) is not None}
        samples = stage_samples(records)
        covered = {s.tree for s in samples} | {t for c in pending if (t := DraftTree.of(c)) is not None}
        # 2. coverage
        if len(covered) < MIN_TREES and candidates:
            tree = self._cover(tried, candidates)
            return Decision(Action.PROPOSE, candidates[tree], why=f"coverage: {tree.label()}")
        if pending:
            return Decision(Action.PASS)  # wait for what is in flight before judging the race
        launches = answer_launches(records, lossy)
        predictions = model_predictions(records)  # the final answer's ranking, so the race follows it
        answer = choose_answer(launches, predictions=predictions)
        if answer is None:
            if candidates:
                tree = self._cover(tried, candidates)
                return Decision(Action.PROPOSE, candidates[tree], why=f"coverage: {tree.label()}")
            return Decision(Action.PASS)
        # 3. the model. The leader's figure is a median of noisy launches: once the study has measured
        # its noise (pooled over repeats) that is added; a prior is a guess, and guesses rule nothing in.
        pooled = answer.verdict.noise_source is NoiseSource.POOLED
        leader_noise = answer.verdict.launch_sd / math.sqrt(len(answer.launches)) if pooled else 0.0
        fitted = predict_prospects(records, samples, candidates, leader_noise)
        best = answer.median
        if fitted is None and candidates:  # no model, or its error not measured yet: cover instead
            tree = self._cover(tried, candidates)
            return Decision(Action.PROPOSE, candidates[tree], why=f"coverage: {tree.label()}")
        if fitted is None:
            # Every tree is tried, with too few to measure the model's error: no tree is left to rule
            # out, and the fit still ranks the race (the accept lengths pool every launch of a tree).
            if len({s.tree for s in samples}) < MIN_TREES:
                # A space of fewer trees than the model needs: the memory flags are what is left to
                # search, and the sampler's start-up would spend half its launches on flags that throttle
                # the workload (see `memory_flags`).
                leader = self._leader_record(records, answer)
                flags = (
                    covering_flags(self.spec, self.structure, leader.result.config, launched, model)
                    if leader is not None
                    else None
                )
                if flags:
                    return Decision(Action.PROPOSE, flags[0], why=flags[1])
                # Every flag is launched: what is left is the race. Handed to the sampler, the space
                # ran out with one launch of each, and the answer was the luckiest of a dozen draws of
                # one tree (on a noisy node 11-15 % short of the server without speculation).
                return self._race_or_stop(records, answer, launches, 0, None, lossy)
            fitted = ([], fit(samples), math.inf)
        prospects, spec_model, error = fitted
        alive = [p for p in prospects if p.upper() > best]
        if alive:
            pick = max(alive, key=lambda p: p.gain(best))
            why = (
                f"model: {pick.tree.label()} predicted {pick.mean:.1f} +- {pick.sd:.1f} tok/s "
                f"against {best:.1f} (it misses unseen trees by {100 * error:.1f} %, leave-one-out; "
                f"{len(alive)} it cannot rule out)"
            )
            return Decision(Action.PROPOSE, pick.config, why=why)
        # 4. around the leader
        leader = self._leader_record(records, answer)
        if leader is not None:
            around = self._around(leader, launched, model)
            if around is not None:
                return around
        # 5. the race, then 6. the stop
        return self._race_or_stop(records, answer, launches, len(prospects), spec_model, lossy)

    def _cover(self, tried: set[DraftTree], candidates: dict[DraftTree, ServerConfig]) -> DraftTree:
        """The classic chain (top-k 1, the middle depth) first, then the tree farthest from those tried."""
        chains = [t for t in candidates if t.topk == 1]
        if not tried and chains:
            depths = sorted({t.steps for t in chains})
            return min(chains, key=lambda t: abs(t.steps - depths[len(depths) // 2]))
        return max(sorted(candidates), key=lambda t: spread(t, tried, self._scale))

    @staticmethod
    def _leader_record(records: Sequence[TrialRecord], answer: Answer) -> TrialRecord | None:
        return next((r for r in records if r.number == answer.representative), None)

    def _around(
        self, leader: TrialRecord, launched: Collection[ServerConfig], model: MemoryModel
    ) -> Decision | None:
        config = leader.result.config
        tree = DraftTree.of(config)
        if tree is None:
            return None
        modes = [m for m in self.spec.search.speculative_adaptive if m is not AdaptiveMode.OFF]
        if tree.topk == 1 and not config.speculative_adaptive:
            for mode in modes:
                variant = make_config(
                    config.mem_fraction_static,
                    config.cuda_graph_max_bs,
                    config.max_running_requests,
                    tree.steps,
                    tree.topk,
                    tree.draft_tokens,
                    mode,
                    dict(config.engine_values),
                )
                if self.server_of(variant) not in launched and not model.predict(variant).skip:
                    return Decision(Action.PROPOSE, variant, why=f"around the leader: adaptive {mode.value}")
        if self._throttled(leader):
            wider = Structure(
                cuda_graph_max_bs=int(max(dim_values(self.spec.search.cuda_graph_max_bs, integer=True))),
                max_running_requests=int(
                    max(dim_values(self.spec.search.max_running_requests, integer=True))
                ),
                fractions=self.structure.fractions,
                engine_values=config.engine_values,
            )
            served = {r.result.config.mem_fraction_static for r in [leader]}
            variant_or_none = fitting_config(wider, tree, model, served)
            if variant_or_none is not None and self.server_of(variant_or_none) not in launched:
                return Decision(
                    Action.PROPOSE, variant_or_none, why="around the leader: its stages show a throttle"
                )
        return None

    @staticmethod
    def _throttled(leader: TrialRecord) -> bool:
        stages = sorted((s for s in leader.result.stages if s.completed > 0), key=lambda s: s.concurrency)
        if any(s.retractions for s in stages):
            return True
        return len(stages) >= 2 and stages[-1].output_tok_per_s < stages[-2].output_tok_per_s * (
            1 + THROTTLE_GAIN
        )

    def _race_or_stop(
        self,
        records: Sequence[TrialRecord],
        answer: Answer,
        launches: Sequence[Launch],
        ruled_out: int,
        spec_model: SpecModel | None,
        lossy: Collection[int] = (),
    ) -> Decision:
        verdict = answer.verdict
        trees = f"; the model rules out the {ruled_out} untried tree(s) left" if ruled_out else ""
        if confirmation_moot(records, lossy):
            # Racing speculative configurations decides which of them is best, and none is the answer:
            # the server without speculation is clearly ahead of them all, at every level.
            return Decision(
                Action.STOP,
                why=f"the answer is known: the server without speculation is clearly ahead of every "
                f"speculative configuration at every level{trees}",
            )
        first_of = {r.number: r for r in records}
        groups = group_launches(launches)
        counts = {g.numbers[0]: len(g.numbers) for g in groups}
        if verdict.call is Call.CLEARLY_AHEAD and verdict.noise_source is NoiseSource.PRIOR:
            # A lead called clear on the prior is clear on what nodes of this kind usually do, not on
            # what this one did: the regime is read off the decode step, and a node that steps like GPU
            # work can still move 7 % between launches. Stopping on it gave the budget back with answers
            # 2-5 % short (a single launch each, the leader the luckiest of a dozen draws). So the leader
            # and the runner-up are launched again until the study pools its own spread; on a node as
            # steady as its prior that is two launches the confirmation would spend anyway.
            pair = [answer.launches[0], *verdict.runner_up[:1]]
            number = min(pair, key=lambda n: (counts.get(n, 1), n != answer.launches[0]))
            if number in first_of:
                return _relaunch(
                    first_of[number],
                    f"measure the noise: trial {number}'s configuration again ({counts.get(number, 1) + 1} "
                    f"launches); the lead is clear on the prior alone: {verdict.statement}",
                )
        calls = [verdict] if verdict.call is Call.TOO_CLOSE else []
        racing = {answer.launches[0]: len(answer.launches)}
        if calls:
            # Which of those within the noise to race: the model's ranking, which pools every launch of
            # every tree (the accept lengths are exact, only the rates are noisy), is steadier than a few
            # medians; without a model (a space of one or two trees), the medians.
            def predicted(number: int) -> float:
                tree = DraftTree.of(first_of[number].result.config) if number in first_of else None
                if spec_model is not None and tree is not None:
                    return spec_model.objective(tree)
                return next((g.median for g in groups if g.numbers[0] == number), 0.0)

            close = sorted(verdict.too_close_with, key=lambda n: -predicted(n))[: RACE_TOP - 1]
            racing.update((n, counts.get(n, 1)) for n in close)
        rival = baseline_rival(records, launches)
        if rival is not None:
            # The server without speculation within the noise of the leader: one launch of it against
            # the leader's several, or the best of many draws, decided the answer by luck (the real-derived
            # cases whose optimum is no speculation: the speculative answer in 25-60 % of noisy runs).
            number, n, call = rival
            racing[number] = n
            calls.append(call)
        if not calls:
            return Decision(Action.STOP, why=f"the answer is known: {verdict.statement}{trees}")
        number, least = min(racing.items(), key=lambda kv: (kv[1], kv[0] != answer.launches[0], kv[0]))
        if number not in first_of:
            return Decision(Action.PASS)
        said = "; ".join(c.statement for c in calls)
        if least >= self.race_launches and all(
            c.noise is not None and c.noise <= CLOSE_ENOUGH for c in calls
        ):
            return Decision(
                Action.STOP,
                why=f"the answer is known as well as it matters: {said}; what is left "
                f"between them is below {100 * CLOSE_ENOUGH:.0f} %{trees}",
            )
        if least >= self.race_launches:
            # Every close configuration has its launches and the call is still too close: the figures
            # differ by less than this node's noise can show, so say so once, then go on racing (the
            # least-launched first) while the budget lasts: more launches are what separate them.
            log.info("still too close after %d launches each: %s", self.race_launches, said)
        return _relaunch(
            first_of[number], f"race: trial {number}'s configuration again ({least + 1} launches)"
        )


def baseline_rival(
    records: Sequence[TrialRecord], launches: Sequence[Launch]
) -> tuple[int, int, Verdict] | None:
    """The server without speculation when its comparison with the speculative leader is too close to
    call: its first launch, how many launches it has, and that verdict; None otherwise."""
    baseline = baseline_launches(records)
    if not baseline:
        return None
    full = choose_answer(launches, baseline, model_predictions(records))  # never None: the baseline ran
    call = None if full is None else full.verdict if full.nospec else full.versus_nospec
    if call is None or call.call is not Call.TOO_CLOSE:
        return None
    return baseline[0].number, len(baseline), call


def _relaunch(first: TrialRecord, why: str) -> Decision:
    """Launch the configuration of ``first`` (a configuration's first launch) again, as its repeat; a
    repeat of the baseline is the baseline again (and, unlike its first launch, paid from the budget)."""
    attrs: dict[str, Any] = {TrialAttr.CONFIRM_OF: first.number}
    if first.baseline:
        attrs[TrialAttr.BASELINE] = True
    return Decision(Action.PROPOSE, first.result.config, attrs=attrs, why=why)
