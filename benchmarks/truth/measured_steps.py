"""The H200's measured step costs, read from the product's own records of `trials/h200-8b-trees.yaml`.

Each stage of each trial there is one cell: a tree (or none) at a running batch, its output tok/s and
accept length. With equal lengths the stage ran in waves of the batch (a prefill, then the decode
steps), and with a dummy draft (accept length 1.01) a wave's length is the step's cost: `wave_s` reads
each cell's wave from its record and `sim.truth.step_from_wave` turns it into the seconds of one step,
through the simulator's own timing of a wave. The result is the profile
`h200-llama8b-measured` (the parametric `h200-llama8b` with `measured_steps`), written by
`python -m benchmarks.truth.measured_steps` and held to these records by a test.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import TypeAdapter

from benchmarks.harness.paths import ROOT
from orchestrator.config.draft_tree import DraftTree
from orchestrator.records import StageMetrics, TrialRecord, TrialStatus
from orchestrator.sim.profile import PROFILE_DIR, load_profile
from orchestrator.sim.speed import SpeedModel
from orchestrator.sim.truth import step_from_wave, tree_key
from orchestrator.spec.sweep_spec import load_spec

FIXTURES = ROOT / "tests" / "fixtures" / "sglang" / "0.5.17"
# The first part ran the baseline and 7 trees before its device time ran out; the second 5 more trees, the
# third 4 more (3/2/7, 2/2/4, 3/4/4 and the 4-step chain).
PARTS = ("llama8b-trees", "llama8b-trees-2", "llama8b-trees-3")
SPEC = ROOT / "trials" / "h200-8b-trees.yaml"
BASE_PROFILE = "h200-llama8b"
MEASURED_PROFILE = "h200-llama8b-measured"
_RECORD = TypeAdapter(TrialRecord)


@dataclass(frozen=True)
class MeasuredCell:
    """One measured stage: what the H200 did, and the step it implies."""

    source: str  # part/trial, e.g. llama8b-trees/0003
    tree: DraftTree | None
    batch: int
    tok_s: float  # as recorded on the H200
    accept: float
    wave_s: float
    step_s: float
    # What today's client reads of the same stage: a stage measured whole as recorded; a steady one at its
    # waves' rate (its record's window ended at the last send and counted the last wave's sends but one).
    client_tok_s: float


@dataclass(frozen=True)
class _Stage:
    source: str
    tree: DraftTree | None
    batch: int
    tok_s: float
    accept: float
    wave_s: float
    steady: bool


def wave_s(stage: StageMetrics, batch: int) -> float:
    """The seconds of one wave of ``batch`` requests, as the stage ran them.

    A steady stage's window runs from the first send of its second wave to the last send of its last
    wave: the waves between, so the window over their count is the wave its figure saw. Its tok/s is not
    that wave's rate: the client counts the requests sent inside the window, and with lockstep waves the
    last wave's sends but its very last fall inside (on the H200 every steady stage counted exactly
    ``(waves - 2) * batch + batch - 1`` requests, 24 % more than its waves at 32 and 6 waves). A stage
    measured whole ran all its waves in its duration, and its figure is their rate.
    """
    waves = math.ceil(stage.num_requests / batch)
    if stage.steady and waves > 2:
        return stage.window_s / (waves - 2)
    return stage.duration_s / waves


def _stages() -> list[_Stage]:
    out = []
    for part in PARTS:
        for path in sorted((FIXTURES / part / "records").glob("*.json")):
            record = _RECORD.validate_json(path.read_text())
            result = record.result
            if result.status is not TrialStatus.OK:
                continue
            tree = DraftTree.of(result.config)
            for stage in result.stages:
                batch = min(stage.concurrency, result.config.max_running_requests or stage.concurrency)
                accept = (stage.accept_length or 1.0) if tree is not None else 1.0
                wave = wave_s(stage, batch)
                source = f"{part}/{path.stem}"
                out.append(_Stage(source, tree, batch, stage.output_tok_per_s, accept, wave, stage.steady))
    return out


def prefill_per_token_s(stages: list[_Stage], input_len: int) -> float:
    """The prefill's cost per prompt token, from the two stages of the server without speculation.

    A stage is waves of a prefill and ``output_len - 1`` decode steps. Without speculation an 8B model's
    decode step is memory-bound (each reads the 16 GB of weights once), so its step at 32 running requests
    costs what it does at 8; the two stages' waves then differ by the prefill of the extra prompts alone.
    (The parametric profile's 40 us a token left the step at 32 cheaper than at 8.)
    """
    base = sorted((s for s in stages if s.tree is None), key=lambda s: s.batch)
    low, high = base[0], base[-1]
    return (high.wave_s - low.wave_s) / ((high.batch - low.batch) * input_len)


# Two stages cannot tell a prefill's fixed cost from its cost per token. The node prefills arrivals as
# they come (one request at a time, once a stage has desynchronised) where the stage model prefills a
# wave at once: with a fixed cost of 8 ms (the parametric profile's) the node paid it per request and
# served 10.6 % below the H200 at concurrency 8. A fixed cost near zero makes both prefills cost the same.
PREFILL_BASE_S = 0.0005


def measured_profile_overrides() -> dict[str, Any]:
    """What the measured profile changes besides its steps: the prefill, read from the same records."""
    wl = load_spec(SPEC).workload
    return {
        "prefill_base_s": PREFILL_BASE_S,
        "prefill_per_token_s": round(prefill_per_token_s(_stages(), wl.input_len), 9),
    }


def per_verify(accept_length: float, output_len: int) -> float:
    """The tokens one verify step yields, from SGLang's accept length of a request of ``output_len``.

    SGLang's figure is completion tokens over verify steps, so it counts the prefill's token too: 128
    tokens verified 127 times read 1.008 with no draft accepted. The decode steps of a wave are the
    verifies, ``output_len / accept_length`` of them, and each yields ``(output_len - 1)`` over that.
    """
    return (output_len - 1) * accept_length / output_len


def measured_cells() -> list[MeasuredCell]:
    """Every stage of every trial that served, in record order, with the step it implies."""
    wl = load_spec(SPEC).workload
    profile = load_profile({"base": BASE_PROFILE, **measured_profile_overrides()})
    cells = []
    for st in _stages():
        prefill = SpeedModel(profile, 1, st.tree, ()).prefill_time(st.batch * wl.input_len)
        gain = per_verify(st.accept, wl.output_len) if st.tree is not None else 1.0  # no verify: 1 a step
        step = step_from_wave(st.wave_s, gain, wl.output_len, prefill)
        client = st.batch * wl.output_len / st.wave_s if st.steady else st.tok_s
        cells.append(MeasuredCell(st.source, st.tree, st.batch, st.tok_s, st.accept, st.wave_s, step, client))
    return cells


def profile_mapping(cells: list[MeasuredCell]) -> dict[str, Any]:
    return {
        "base": BASE_PROFILE,
        "name": MEASURED_PROFILE,
        "description": "Llama-3-8B shape + EAGLE-3 draft on one H200 (SGLang 0.5.17): measured step costs",
        **measured_profile_overrides(),
        "measured_steps": [
            {"tree": tree_key(c.tree), "batch": c.batch, "step_s": round(c.step_s, 7)} for c in cells
        ],
    }


HEADER = """\
# The Llama-3-8B shape on one H200 (SGLang 0.5.17) with its decode steps as measured there: the parametric
# h200-llama8b profile (memory, start-up, noise) with `measured_steps` in place of its step formula, and
# its prefill read from the same records. Written by `python -m benchmarks.truth.measured_steps` from the
# records of trials/h200-8b-trees.yaml (tests/fixtures/sglang/0.5.17/llama8b-trees*/): do not edit by hand;
# a test holds it to the records. Acceptance is not here (the dummy draft accepted nothing): a case adds it.
"""


def write_profile(path: Path = PROFILE_DIR / f"{MEASURED_PROFILE}.yaml") -> Path:
    path.write_text(HEADER + yaml.safe_dump(profile_mapping(measured_cells()), sort_keys=False, width=110))
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--print", action="store_true", help="print the cells instead of writing the profile")
    args = parser.parse_args()
    if args.print:
        head = f"{'source':22} {'tree':9} {'batch':>5} {'tok/s':>8} {'accept':>6} {'wave s':>7}"
        print(f"{head} {'step ms':>8}")
        for c in measured_cells():
            print(
                f"{c.source:22} {tree_key(c.tree):9} {c.batch:5d} {c.tok_s:8.1f} {c.accept:6.3f} "
                f"{c.wave_s:7.3f} {1000 * c.step_s:8.3f}"
            )
        return
    print(f"wrote {write_profile()}")


if __name__ == "__main__":
    main()
