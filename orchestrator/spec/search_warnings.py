"""The search notes printed before a sweep starts: searched values the engine serves as one server, and a
draft-token cap the searched trees cannot keep.

Valid, and no launch is spent on a server measured under another name (the driver answers it from the
record, `spec.engine_catalog.server_of`), but such a dimension searches less than it looks: the users'
own notes searched graph batches up to 512 under 48 running requests, which SGLang serves as 48. A tree of
s steps verifies s + 1 tokens at least (`config.draft_tree.draft_token_bounds`), so under a cap below that
it launches above the cap: said before anything launches, with both ways to make them agree. Advice, not
errors; the CLI prints them under the spec's summary.
"""

from __future__ import annotations

from orchestrator.config.draft_tree import DraftTree, draft_token_bounds
from orchestrator.config.served import step_below
from orchestrator.spec import engine_catalog
from orchestrator.spec.engine_space import RuleKind, SameServer
from orchestrator.spec.search import Choices, FloatRange, IntRange, SearchSpace, grid_values
from orchestrator.spec.sweep_spec import SweepSpec

Dim = FloatRange | IntRange | Choices


def one_server_warnings(spec: SweepSpec) -> list[str]:
    """One note per rule of the engine under which several searched values of a field are one server."""
    notes = []
    for rule in engine_catalog.same_server(spec.engine):
        values = _values(_dim(spec, rule.name))
        if len(values) < 2:
            continue
        note = _capped(spec, rule, values) if rule.kind is RuleKind.CAPPED else _stepped(spec, rule, values)
        if note:
            notes.append(note)
    return notes


def _capped(spec: SweepSpec, rule: SameServer, values: list[float]) -> str:
    caps = _values(_dim(spec, rule.at))
    if not caps or (rule.where_at and any(c not in rule.where_at for c in caps)):
        return ""  # a cap the rule does not hold at keeps its values apart
    top = max(caps)
    same = [v for v in values if v >= top]
    if len(same) < 2:
        return ""
    return (
        f"note: {_key(rule.name)}: {_words(same)} are one server at every {rule.at} searched "
        f"(at most {top:g}): the {spec.engine} engine serves a {rule.name} above {rule.at} as {rule.at}'s; "
        f"the server is launched once under any of these names, the others answered from its record. Keep "
        f"one of them, or raise {_key(rule.at)}"
    )


def _stepped(spec: SweepSpec, rule: SameServer, values: list[float]) -> str:
    if rule.step <= 0:
        return ""  # no step: a rule that serves every value as itself
    groups: dict[float, list[float]] = {}
    for v in values:
        groups.setdefault(step_below(v, rule.step), []).append(v)
    same = [g for g in groups.values() if len(g) > 1]
    if not same:
        return ""
    each = " each" if len(same) > 1 else ""
    return (
        f"note: {_key(rule.name)}: {'; '.join(_words(g) for g in same)} are one server{each}: the "
        f"{spec.engine} engine takes it in "
        f"steps of {rule.step:g}; the server is launched once under any of these names, the others answered "
        f"from its record. Keep one of them"
    )


def draft_cap_warnings(spec: SweepSpec) -> list[str]:
    """A note when the searched steps hold trees whose smallest size is above the draft-token cap (the
    dimension's largest value): those trees launch at that size, not inside the dimension. A tree too
    small for the dimension's floor is launched whole, which is below what was asked, not above it."""
    search = spec.search
    steps = grid_values(search.speculative_num_steps, integer=True) or []
    topks = grid_values(search.speculative_eagle_topk, integer=True) or []
    cap = max(grid_values(search.speculative_num_draft_tokens, integer=True) or [0])
    over = [int(s) for s in steps if draft_token_bounds(int(s), 1)[0] > cap]
    if not over or not topks:
        return []
    # the smallest tree of top-k > 1 at the first such steps, and the chain at the last
    widest = next((int(k) for k in topks if k > 1), None)
    trees = [DraftTree(over[0], widest, over[0] + 1)] if widest is not None else []
    trees += [DraftTree(over[-1], 1, over[-1] + 1)] if 1 in topks else []
    examples = [tree.label() for tree in trees]
    return [
        f"note: search.speculative_num_draft_tokens: at most {cap:g}, but a tree of s steps verifies s + 1 "
        f"tokens at least: at steps {_words([float(s) for s in over])} every tree searched launches above it "
        f"({', '.join(examples)}, ...). To keep the cap, search search.speculative_num_steps to at most "
        f"{int(cap) - 1}; to keep the steps, raise the cap to at least {over[-1] + 1}"
    ]


def _dim(spec: SweepSpec, name: str) -> Dim | None:
    own = spec.search.engine.get(name)
    if own is not None:
        return own
    dim = getattr(spec.search, name, None) if name in SearchSpace.model_fields else None
    return dim if isinstance(dim, FloatRange | IntRange | Choices) else None


def _values(dim: Dim | None) -> list[float]:
    """The values a dimension searches, ascending; none for a continuous range (it has no list)."""
    return (grid_values(dim) or []) if dim is not None else []


def _key(name: str) -> str:
    """Where the spec searches ``name``: the search section's own key, or its `engine` block."""
    return f"search.{name}" if name in SearchSpace.model_fields else f"search.engine.{name}"


def _words(values: list[float]) -> str:
    text = [f"{v:g}" for v in values]
    return ", ".join(text[:-1]) + f" and {text[-1]}" if len(text) > 1 else text[0]
