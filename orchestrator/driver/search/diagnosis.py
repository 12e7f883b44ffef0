"""Plain-words explanations: why a trial failed, with its figures and the lever to pull.

The engineer in the users' notes read "Main model uses 72.33 GB, leaving 21.71 GB. The draft model
then needs additional memory" off the log and reasoned from there. This does that for every trial.
"""

from __future__ import annotations

import json
import logging
import re
from enum import StrEnum
from pathlib import Path

from orchestrator.driver.memory.learned import GRAPH_SAFETY_GB, MemoryModel, graph_width
from orchestrator.driver.search import grid
from orchestrator.driver.search.memory_walk import MemoryWalk
from orchestrator.records import (
    FailureKind,
    FailureStage,
    ServerConfig,
    TrialResult,
    TrialStatus,
    fraction_text,
)
from orchestrator.spec.search import SearchSpace

log = logging.getLogger(__name__)

BROKEN_ACCEPT = 1.1  # EAGLE-3 that works accepts well above this; a broken draft sits at ~1.0
WORKING_ACCEPT = 1.5  # a draft that reached this on some tree is not broken
EAGLE3_ARCHS = ("LlamaForCausalLMEagle3", "Eagle3LlamaForCausalLM")


def _gb(value: float | None) -> str:
    """A figure of the log's, which it prints as "GB" and which is GiB (2^30 bytes): labelled GiB, as the
    memory command and the learned model's reasons label it."""
    return f"{value:.2f} GiB" if value is not None else "? GiB"


def diagnose(
    result: TrialResult,
    model: MemoryModel,
    best_accept_elsewhere: float | None = None,
    search: SearchSpace | None = None,
) -> str:
    """One paragraph for the MLflow tag, the report and the table.

    `best_accept_elsewhere`: the best acceptance length other trials of the same draft reached; it tells
    a draft that is broken from a tree shape that suits it badly. `search`: the study's space; a value
    the advice names is one of its values (toward safety), never one no trial can launch with.
    """
    status, failure, m, c = result.status, result.failure, result.memory, result.config
    if status is TrialStatus.PREDICTED_OOM:
        return failure.message if failure else "skipped: predicted not to fit"
    if status is TrialStatus.OK:
        return broken_speculation(result, best_accept_elsewhere) or ""
    if failure is None:
        return status.value
    walk = MemoryWalk(m.as_metrics())
    head = weights_words(walk)
    f = c.mem_fraction_static
    if status is TrialStatus.OOM and failure.stage is FailureStage.KV_ALLOCATION and m.kv_cache_tokens:
        # The target's pool is in the log: what did not fit came after it, outside the static pool (the
        # draft's weights or pool, as SGLang <= 0.5.9 loads the draft last). More static pool makes it
        # worse; a smaller one leaves the draft room.
        left = m.avail_end_gb or m.avail_after_kv_gb
        return (
            f"OOM after the target's KV pool was allocated ({m.kv_cache_tokens:,} tokens, "
            f"{_gb(m.kv_cache_gb)}): {head + '; ' if head else ''}at mem_fraction_static {fraction_text(f)} "
            f"the static pool left {_gb(left)} for the draft model, which did not fit. "
            f"Lower mem_fraction_static below {fraction_text(f)} (or use a smaller draft)."
        )
    if status is TrialStatus.OOM and failure.stage is FailureStage.KV_ALLOCATION:
        minimum = model.kv_tokens.solve(1.0) if model.ready else None
        # SGLang 0.5.14+ names the minimum itself: "Raise --mem-fraction-static above 0.002".
        said = re.search(r"above ([0-9.]+)", failure.message)
        if said:
            minimum = float(said.group(1).rstrip("."))
        if minimum is not None:
            minimum = max(minimum, f)  # it failed at f, whatever the fit says
        lever = f"Raise mem_fraction_static above {minimum:.3f}." if minimum else "Raise mem_fraction_static."
        if minimum and search is not None:
            on_grid = grid.above(search.mem_fraction_static, minimum)
            lever = (
                f"Raise mem_fraction_static to {on_grid:g} or more."
                if on_grid is not None
                else f"Raise mem_fraction_static above {minimum:.3f} (beyond the searched range)."
            )
        return (
            f"OOM while allocating the KV cache: {head or 'the weights leave no room'}; at "
            f"mem_fraction_static {fraction_text(f)} nothing is left for the KV pool. {lever}"
        )
    if status is TrialStatus.OOM and failure.stage in (
        FailureStage.TARGET_GRAPH_CAPTURE,
        FailureStage.DRAFT_GRAPH_CAPTURE,
    ):
        whose = "the draft's" if failure.stage is FailureStage.DRAFT_GRAPH_CAPTURE else "the target's"
        room = m.avail_after_kv_gb
        need = model.graph_need_at(graph_width(c))
        text = f"OOM while capturing {whose} CUDA graphs: {head + '; ' if head else ''}"
        text += f"at mem_fraction_static {fraction_text(f)}, {_gb(room)} were free after the KV pool"
        text += f"{'s' if m.draft_kv_cache_gb and not walk.draft_late else ''} for the CUDA graphs and the "
        text += f"rest of start-up ({walk.rest_words}): not enough. {need_words(model, c)}"
        levers = []
        if need is not None:
            better_f = model.fraction_for_room(need)
            if better_f is not None and 0 < better_f < 1:
                lower = better_f < f
                if search is not None:  # the grid value on the safe side of the estimate
                    dim = search.mem_fraction_static
                    better_f = grid.at_most(dim, better_f) if lower else grid.at_least(dim, better_f)
                if better_f is not None:
                    shown = f"{better_f:g}" if search is not None else f"{better_f:.3f}"
                    levers.append(f"{'Lower' if lower else 'Raise'} mem_fraction_static to {shown}")
        if room is not None:
            width = model.width_for_room(room)
            per_req = c.speculative_num_draft_tokens or 1
            if width is not None and width > 0:
                bs: float | None = max(1, int(width // per_req))
                if search is not None and bs is not None:
                    bs = grid.at_most(search.cuda_graph_max_bs, bs)
                if bs is not None and bs < c.cuda_graph_max_bs:
                    levers.append(f"lower cuda_graph_max_bs to {bs:g}")
        if not levers:
            levers.append("lower cuda_graph_max_bs, or leave more memory outside the static pool")
        return text + " " + " or ".join(levers).capitalize() + "."
    if status is TrialStatus.OOM_UNDER_LOAD:
        return (
            f"out of memory under load ({failure.message}); the server started but could not serve "
            f"max_running_requests {c.max_running_requests}. Lower max_running_requests or raise the KV pool."
        )
    if status is TrialStatus.KV_PRESSURE:
        return failure.message
    if failure.kind is FailureKind.CRASH and failure.stage in (
        FailureStage.TARGET_GRAPH_CAPTURE,
        FailureStage.DRAFT_GRAPH_CAPTURE,
    ):
        return f"CUDA graph capture failed for a reason other than memory: {failure.message}"
    if status is TrialStatus.TIMEOUT:
        return f"timeout at {failure.stage.value}: {failure.message}"
    if status is TrialStatus.INTERRUPTED:
        return f"interrupted: {failure.message}"
    if status is TrialStatus.LOST:
        return f"lost: the node or its worker died ({failure.message}); not a property of the configuration"
    return f"{failure.kind.value} at {failure.stage.value}: {failure.message}"


def weights_words(walk: MemoryWalk) -> str:
    """What the weights take and what they leave, "leaving" being what the figures named leave."""
    start, target, draft = walk.get("avail_at_start_gb"), walk.get("weights_gb"), walk.get("draft_weights_gb")
    after = walk.get("avail_after_weights_gb")
    if target is None or not start:
        return ""
    if walk.draft_late is False and draft:
        return (
            f"the target's weights take {_gb(target)} and the draft's {_gb(draft)} of {_gb(start)} per GPU, "
            f"leaving {_gb(after)}"
        )
    text = f"the target's weights take {_gb(target)} of {_gb(start)} per GPU"
    if walk.draft_late:
        text += f", leaving {_gb(after)} (the draft's {_gb(draft)} load later, after the target's graphs)"
    else:
        text += f", the draft's {_gb(draft)}" if draft else ""
        text += f"; {_gb(after)} were free after the weights" if after is not None else ""
    return text


def need_words(model: MemoryModel, config: ServerConfig) -> str:
    """What the memory model now counts on for the graphs at this launch's width, and from what."""
    width = graph_width(config)
    need = model.graph_need_at(width)
    if need is None:
        return ""
    fit = model.graph_need(width) if model.graph_need.known else None
    floors = [gb for w, gb in model.graph_floor if w <= width]
    if floors and (fit is None or max(floors) + 0.01 >= fit):
        floor = max(floors)
        return (
            f"A launch at this graph size or below ran out with {_gb(floor)} free there: the memory model "
            "now asks for "
            f"{_gb(need + GRAPH_SAFETY_GB)} ({_gb(need)}, above that, and its {_gb(GRAPH_SAFETY_GB)} margin)."
        )
    return (
        f"The CUDA graphs alone are estimated at about {_gb(need)} ({_gb(need + GRAPH_SAFETY_GB)} with the "
        f"memory model's {_gb(GRAPH_SAFETY_GB)} margin), before the rest of start-up."
    )


def accept_length(result: TrialResult) -> float | None:
    """``TrialResult.accept_length`` (the one rule), for callers that take it as a function."""
    return result.accept_length


class Speculation(StrEnum):
    """What a finished trial's acceptance says of its draft."""

    FINE = "fine"  # no speculation, or it accepts
    POOR_TREE = "poor_tree"  # nothing accepted on this tree, while the draft works on others
    BROKEN = "broken_speculation"  # nothing accepted, and nowhere else either: the draft never helps


def speculation(result: TrialResult, best_accept_elsewhere: float | None = None) -> Speculation:
    """The verdict `broken_speculation` words: observers read this, never the words."""
    accept = result.accept_length
    if not result.config.speculative:
        return Speculation.FINE
    if accept is None or accept > BROKEN_ACCEPT:
        return Speculation.FINE
    if best_accept_elsewhere is not None and best_accept_elsewhere >= WORKING_ACCEPT:
        return Speculation.POOR_TREE
    return Speculation.BROKEN


def broken_speculation(result: TrialResult, best_accept_elsewhere: float | None = None) -> str:
    """Acceptance near 1.0 with speculation on: the draft never helps (the users' silent failure).

    When other trials of the same draft accept well, the draft works and this tree shape is what gets
    nothing accepted: that is said instead, and is not the loud broken-draft alarm.
    """
    verdict = speculation(result, best_accept_elsewhere)
    accept = result.accept_length
    if verdict is Speculation.FINE or accept is None:
        return ""
    if verdict is Speculation.POOR_TREE and best_accept_elsewhere is not None:
        c = result.config
        return (
            f"poor_tree: acceptance length {accept:.2f} at steps {c.speculative_num_steps}, top-k "
            f"{c.speculative_eagle_topk}, draft tokens {c.speculative_num_draft_tokens}: this tree gets "
            "almost nothing accepted, while other trials of the same draft reach "
            f"{best_accept_elsewhere:.2f}. "
            "The draft works; this speculative setting does not suit it."
        )
    return (
        f"broken_speculation: acceptance length {accept:.2f} with speculation on, so the draft never helps. "
        "Likely causes: an EAGLE-3 draft run as --speculative-algorithm EAGLE (its aux hidden states are "
        "never captured and the fusion layer is skipped, silently); the target does not capture aux hidden "
        "states for EAGLE-3; the draft was trained for another target (hidden size or layer ids differ); "
        "or random (dummy) draft weights."
    )


def check_draft_config(draft_path: str, algorithm: str) -> str:
    """Before any launch: SGLang 0.5.17 serves an EAGLE-3 draft under EAGLE without a word."""
    config_path = Path(draft_path) / "config.json"
    try:
        config = json.loads(config_path.read_text())
    except (OSError, ValueError):
        return ""
    archs = config.get("architectures") or []
    eagle3 = any(a in EAGLE3_ARCHS for a in archs) or "eagle_aux_hidden_state_layer_ids" in json.dumps(config)
    if eagle3 and algorithm != "EAGLE3":
        return (
            f"model.speculative_algorithm is {algorithm}, but {config_path} describes an EAGLE-3 draft "
            f"({', '.join(archs) or 'eagle_aux_hidden_state_layer_ids'}): SGLang would serve it with an "
            "acceptance length of about 1.0 and no warning. Set speculative_algorithm: EAGLE3."
        )
    return ""
