"""Confirmation: launch the top configurations again, so the answer is the best median of launches.

On a CPU-overhead-bound node one launch cannot separate configurations closer than about 10 %: two
starts of the same configuration differ by several percent. So the end of a sweep spends a reserved
share of its budget on more launches of its best few configurations, ranked by the median of their
launches (one lucky draw no longer wins). `driver.answer.choose` names the winner and says how sure it is;
the repeats also measure the node's own launch-to-launch spread (`orchestrator.driver.answer.noise`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

import optuna

from orchestrator.driver.store.trial_attrs import TrialAttr
from orchestrator.mlflow_schema import Tag
from orchestrator.records import ServerConfig, TrialRecord, TrialStatus, machine_of
from orchestrator.spec.sweep_spec import BudgetSpec


@dataclass(frozen=True)
class Ranked:
    """One configuration and what its launches measured."""

    config: ServerConfig
    numbers: tuple[int, ...]  # the trials that launched it and measured a value, in order
    values: tuple[float, ...]  # their objectives, same order
    median: float

    @property
    def repeats(self) -> int:
        return len(self.values)

    @property
    def first(self) -> int:
        return self.numbers[0]

    @property
    def representative(self) -> int:
        """The launch whose value is the median (the lower middle one for an even count)."""
        order = sorted(range(len(self.values)), key=lambda i: self.values[i])
        return self.numbers[order[(len(order) - 1) // 2]]


def reserved_launches(budget: BudgetSpec, n_trials: int, left: int | None = None) -> int:
    """Launches kept back from the search for confirmation: ``confirm_top x (confirm_repeats - 1)``
    (each top configuration has one launch from the search), or none when that is more than half of
    ``n_trials`` (a sweep too small to confirm is better spent searching; ``confirmation_note`` says so).
    ``n_trials``: the launches the search and this confirmation have in all, a resumed study's search
    launches included (stopped during its search, it keeps what its first invocation kept); ``left``:
    those still to make (default: all), which bound the reserve."""
    want = budget.confirm_top * (budget.confirm_repeats - 1)
    if not 0 < want <= n_trials // 2:
        return 0
    return min(want, n_trials if left is None else left)


def confirmation_note(
    budget: BudgetSpec, n_trials: int, spent: int = 0, confirmed: int = 0, *, by_flag: bool = False
) -> str:
    """Why a sweep runs no confirmation although its spec asks for one ('' when it runs, or is off).
    ``n_trials``: the launches left; ``spent``: those an earlier invocation of a resumed study made
    (``confirmed`` of them confirmation launches), so that the fix named is the budget to resume with,
    not one the study already has; ``by_flag``: the budget came from --trials, which the fix then names
    (the spec's key would change nothing under it)."""
    want = budget.confirm_top * (budget.confirm_repeats - 1)
    if want == 0 or reserved_launches(budget, spent - confirmed + n_trials, n_trials):
        return ""
    why = (
        f"cannot spare {want} (budget.confirm_top {budget.confirm_top} x (budget.confirm_repeats "
        f"{budget.confirm_repeats} - 1)) and keep half for the search"
    )
    if spent:
        return (
            f"no confirmation launches: the {n_trials} trial(s) left {why}; resume with --resume --trials "
            f"{confirmed + 2 * want} to confirm, or lower budget.confirm_top"
        )
    trials = "--trials" if by_flag else "budget.trials"
    return (
        f"no confirmation launches: {n_trials} trial(s) {why}; raise {trials} to {2 * want} or lower "
        "budget.confirm_top"
    )


def confirmation_line(budget: BudgetSpec, reserved: int, left: int, needed: int | None = None) -> str:
    """What the start of a sweep says of the launches it keeps for the confirmation (`reserved` of the
    `left`): they top the best configurations up to `budget.confirm_repeats` launches each, so they are
    fewer than top x repeats where those already ran once. ``needed``: what the best so far of a resumed
    study still need (`ConfirmationReserve.confirmation_needed`), said where it is less than is kept."""
    top, repeats = budget.confirm_top, budget.confirm_repeats
    kept = f"{reserved} of the {left} launches left {'is' if reserved == 1 else 'are'} kept"
    back = "what a new leader would not need then goes back to the search"
    if needed == 0:
        have = "configuration so far already has" if top == 1 else f"{top} configurations so far already have"
        return f"confirmation: {kept} for the end, though the best {have} {repeats} launches each: {back}"
    best = (
        "the best configuration until it has" if top == 1 else f"the best {top} configurations until each has"
    )
    line = f"confirmation: {kept} to relaunch {best} {repeats} launches"
    if needed is not None and needed < reserved:
        line += f" ({needed} needed by the best so far; {back})"
    return line


def time_to_confirm(records: Sequence[TrialRecord], reserve: int, slots: int) -> float | None:
    """Seconds the ``reserve`` confirmation launches take on ``slots`` nodes, from the launches so far:
    a confirmation launch runs every stage, so it costs what a full measured launch cost (their median
    wall time). None before any full launch: there is nothing to confirm yet, and nothing to estimate."""
    walls = [r.result.wall_s for r in measured(records) if r.result.wall_s > 0]
    if reserve <= 0 or not walls:
        return None
    return math.ceil(reserve / max(slots, 1)) * statistics.median(walls)


def confirmations_before(clock: float, deadline: float, reserve: int, each_s: float, slots: int) -> int:
    """How many of ``reserve`` confirmation launches of ``each_s`` seconds start before the ``deadline``
    (no launch starts after it), from ``clock``, ``slots`` at a time."""
    if clock >= deadline:
        return 0
    if each_s <= 0:
        return reserve
    rounds = math.ceil((deadline - clock) / each_s)  # one round starts at clock, the next each_s later
    return min(reserve, rounds * max(slots, 1))


def confirmation_stop_detail(clock: float, deadline: float, reserve: int, each_s: float, slots: int) -> str:
    """Why the search ended before its time budget, as the stop line says it: the launches kept for the
    confirmation and how many of them can still start. "So that they still fit" was said of two launches
    of which one could start."""
    can = confirmations_before(clock, deadline, reserve, each_s, slots)
    if can >= reserve:
        need = math.ceil(reserve / max(slots, 1)) * each_s
        launches = f"the {reserve} confirmation launches (about {need:.0f} s)"
        return f"the search ended early so that {launches} start before it"
    rest = "the other stays" if reserve - can == 1 else "the others stay"
    return (
        f"the search ended early for the {reserve} confirmation launches kept (about {each_s:.0f} s each): "
        f"{can} can start before it, {rest} queued for --resume"
    )


def reserve_in_time(
    records: Sequence[TrialRecord],
    budget: BudgetSpec,
    reserve: int,
    slots: int,
    time_budget_s: float,
    baseline: int = 0,
    order: Sequence[str] = (),
) -> int:
    """The confirmation launches a time budget keeps back now: what the top configurations still need
    (``to_confirm`` of the candidate ``records``: with one configuration measured, its repeats only), at
    most ``reserve``, and no more than fit in half the time budget at a full launch's median wall time,
    as ``reserved_launches`` keeps half the launch budget for the search. Without the half a single slow
    first launch (graphs captured for a new shape) priced the whole reserve so high that the search
    ended after it. ``baseline``: 1 when the baseline is launched once more (`relaunch_baseline`);
    ``order``: the answer's ranking (`to_confirm`)."""
    walls = [r.result.wall_s for r in measured(records) if r.result.wall_s > 0]
    if reserve <= 0 or not walls:
        return 0
    need = sum(missing for _, missing in to_confirm(records, budget, order)) + baseline
    fits = int(time_budget_s / 2 // statistics.median(walls)) * max(slots, 1)
    return max(min(reserve, need, fits), 0)


def measured(records: Sequence[TrialRecord]) -> list[TrialRecord]:
    """Launches that measured a value the ranking can use: ok, not pruned, within the latency limits."""
    return [
        r
        for r in records
        if r.result.status is TrialStatus.OK
        and r.objective is not None
        and r.tag(Tag.PRUNED_AT_STAGE) is None
    ]


def candidates(records: Sequence[TrialRecord], lossy: Collection[int] = ()) -> list[TrialRecord]:
    """The speculative launches that can be the answer (the baseline is judged on its own against their
    leader, `choose.choose_answer`), a draft that changed the greedy output never among them.
    Confirmation and the verdict among speculative configurations use these."""
    return [r for r in records if not r.baseline and r.number not in lossy]


def rank(records: Sequence[TrialRecord], order: Sequence[str] = ()) -> list[Ranked]:
    """Every measured configuration, those ``order`` names (labels, as the answer ranks them:
    `conclusion.answer_order`) first in its order, then the rest by best median (ties broken by more
    launches, then the first)."""
    groups: dict[ServerConfig, list[TrialRecord]] = {}
    for r in sorted(measured(records), key=lambda r: r.number):
        groups.setdefault(r.result.config, []).append(r)
    ranked = []
    for config, launches in groups.items():
        values = tuple(float(r.objective or 0.0) for r in launches)
        ranked.append(
            Ranked(
                config=config,
                numbers=tuple(r.number for r in launches),
                values=values,
                median=statistics.median(values),
            )
        )
    place = {label: i for i, label in enumerate(order)}
    ranked.sort(key=lambda c: (place.get(c.config.label(), len(place)), -c.median, -c.repeats, c.first))
    return ranked


def to_confirm(
    records: Sequence[TrialRecord], budget: BudgetSpec, order: Sequence[str] = ()
) -> list[tuple[Ranked, int]]:
    """The top ``confirm_top`` configurations (in the answer's ``order``, where given: `rank`) and how
    many more launches each needs to reach ``confirm_repeats`` (those already there are left out)."""
    out = []
    for c in rank(records, order)[: budget.confirm_top]:
        missing = budget.confirm_repeats - c.repeats
        if missing > 0:
            out.append((c, missing))
    return out


def enqueue(
    study: optuna.Study,
    records: Sequence[TrialRecord],
    budget: BudgetSpec,
    reserve: int,
    baseline: int | None = None,
    order: Sequence[str] = (),
    *,
    width: int,
) -> int:
    """Queue one round of the confirmation (at most ``reserve`` launches, at most ``width``: the trial
    slots) of the top ``candidates``, each marked ``confirm_of`` the first trial of its
    configuration and asked with that trial's own params (under adaptive speculation the launch's steps
    lie outside the searched range); returns how many. A round takes one launch of each configuration in
    turn, in the ranking's order, so that the next round, ranked again, follows a configuration its
    relaunches moved to the top: on one slot a round is one launch (the real pair's grid replayed on one
    H100 queued the runner-up's two and a third configuration's one at once, the ranking put a tree of
    one launch first meanwhile, and the answer was that tree, never relaunched).
    ``baseline`` (`relaunch_baseline`): the baseline trial to launch once more, first: of these launches
    it is the one that can turn the answer (the others refine a ranking among speculative
    configurations), so a reserve too small for the whole plan still holds it. ``order``: the answer's
    ranking (`to_confirm`)."""
    params = {t.number: t.params for t in study.get_trials(deepcopy=False)}
    wanted = to_confirm(records, budget, order)
    turns = max((n for _, n in wanted), default=0)
    plan: list[tuple[int, dict[str, Any]]] = [
        (c.first, {}) for turn in range(turns) for c, n in wanted if n > turn
    ]
    if baseline is not None:
        # The real pair resumed on another H100 kept one launch: after the tree's repeat, the baseline
        # was left out, and the tree was called 14.3 % ahead of a baseline measured on the earlier machine;
        # launched on the tree's, that baseline measured 30 % ahead of it.
        plan.insert(0, (baseline, {TrialAttr.BASELINE: True}))
    most = min(reserve, max(width, 1))
    for first, extra in plan[:most]:
        # every ranked launch, and the baseline, is a trial of this study
        study.enqueue_trial(dict(params[first]), user_attrs={TrialAttr.CONFIRM_OF: first, **extra})
    return min(len(plan), most)


def machine(record: TrialRecord) -> str:
    """The machine a launch ran on: its GPUs' UUIDs, as NVML gave them, since Ray gives a node a new id
    each time it starts (a sweep resumed on the same machine would look moved); its Ray node where the
    record has none (written before they were kept)."""
    return machine_of(record.result.gpu_before or record.result.gpu_after) or record.result.node_id


def machines(records: Sequence[TrialRecord], label: str) -> tuple[set[str], set[str]]:
    """The machines the server without speculation and the configuration labelled ``label`` were
    measured on."""
    ok = [r for r in measured(records) if machine(r)]
    base = {machine(r) for r in ok if r.baseline and not r.result.config.speculative}
    spec = {machine(r) for r in ok if not r.baseline and r.result.config.label() == label}
    return base, spec


def apart(records: Sequence[TrialRecord], label: str) -> bool:
    """Whether the configuration labelled ``label`` and the server without speculation were both measured,
    and never on the same machine."""
    base, spec = machines(records, label)
    return bool(base) and bool(spec) and not base & spec


def relaunch_baseline(records: Sequence[TrialRecord], lossy: Collection[int] = ()) -> int | None:
    """The baseline trial to launch once more in the confirmation, or None. Needed when the configuration
    the confirmation puts first and the server without speculation never ran on one node (a study
    resumed on another machine): the gap between them would be measured across nodes, which the
    confidence statement does not count (`answer.nodes`). Launched first in the confirmation, on the node
    the search ended on (`enqueue`)."""
    ranked = rank(candidates(records, lossy))
    if not ranked or not apart(records, ranked[0].config.label()):
        return None
    return min(r.number for r in measured(records) if r.baseline and not r.result.config.speculative)
