"""The simulated node, given the H200's measured costs, serves what the H200 served.

The oracle (tests/sim/test_sim_truth.py) replays the measured cells through its own timing of a stage;
here the product's whole trial runs instead: `TrialRun` on a `SimulatedNode`, the simulated server as
its own process, the benchmark client streaming from it over HTTP. With the measured profile, acceptance
1.0 (the dummy draft's) and no noise, each stage's output tok/s must come within 3 % of what the client
reads of the H200's stage in the same trial (same spec, same workload: 96 prompts of 256 + 128 tokens,
stages of at least 10 s, so the same stages are extended and the same ones are steady): its record's
figure for a stage measured whole, its waves' rate for a steady one (`MeasuredCell.client_tok_s`).

Each launch takes its stages' real time (12-55 s): the seventeen of them are slow tests.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from benchmarks.truth.measured_steps import MEASURED_PROFILE, SPEC, MeasuredCell, measured_cells
from orchestrator.cli import resolve_profile
from orchestrator.node.backends import SimulatedNode
from orchestrator.node.trial import TrialRun
from orchestrator.records import ServerConfig, TrialStatus
from orchestrator.sim.truth import tree_key
from orchestrator.spec.sweep_spec import Backend, SimulatedSpec, SweepSpec, load_spec
from orchestrator.trial_events import TrialRequest

log = logging.getLogger(__name__)

TOLERANCE = 0.03
CELLS = measured_cells()
LAUNCHES = sorted({tree_key(c.tree) for c in CELLS}, key=lambda k: (k != "none", k))


def replay_spec() -> SweepSpec:
    """The H200 spec on the simulated backend: the measured profile, acceptance 1.0, noise off."""
    trees = sorted({tree_key(c.tree) for c in CELLS} - {"none"})
    profile = {
        "base": MEASURED_PROFILE,
        "accept_table": [{"tree": t, "accept_length": 1.0} for t in trees],
        "step_noise": 0.0,
        "launch_noise": 0.0,
        "drift_noise": 0.0,
    }
    spec = load_spec(SPEC)
    return spec.model_copy(update={"backend": Backend.SIMULATED, "simulated": SimulatedSpec(profile=profile)})


def launch_config(cells: list[MeasuredCell]) -> ServerConfig:
    tree = cells[0].tree
    # The H200 spec's fixed memory flags: mem_fraction_static 0.85, cuda_graph_max_bs 32, 32 running.
    if tree is None:
        return ServerConfig(0.85, 32, 32)
    return ServerConfig(0.85, 32, 32, tree.steps, tree.topk, tree.draft_tokens)


def replay(launch: str, cells: list[MeasuredCell], folder: Path) -> dict[int, float]:
    """One launch through the product's trial: each measured cell's relative error, by concurrency."""
    spec = replay_spec()
    profile = resolve_profile(spec)
    assert profile is not None
    request = TrialRequest(
        spec=spec, config=launch_config(cells), number=0, workdir=str(folder / "t"), sim_profile=profile
    )
    result = TrialRun(request, SimulatedNode(spec, f"replay-{folder.name}", profile), None).run()
    assert result.status is TrialStatus.OK, result.failure

    by_concurrency = {s.concurrency: s for s in result.stages}
    errors = {}
    for cell in cells:
        stage = by_concurrency[cell.batch]  # concurrency 8 and 32, both within 32 running requests
        errors[cell.batch] = stage.output_tok_per_s / cell.client_tok_s - 1
        log.info(
            "%s at %d: measured %.1f tok/s, simulated %.1f (%+.2f %%), %d requests, steady %s",
            launch, cell.batch, cell.client_tok_s, stage.output_tok_per_s, 100 * errors[cell.batch],
            stage.num_requests, stage.steady,
        )  # fmt: skip
    assert sorted(errors) == sorted(by_concurrency)  # every stage has its measured cell
    return errors


@pytest.mark.slow
@pytest.mark.parametrize("launch", LAUNCHES)
def test_the_simulated_node_serves_each_measured_cell_within_3_percent(launch: str, tmp_path: Path) -> None:
    """A steady stage at 32 reads a window of 3-4 waves (7 s): one pause of 0.2 s in the client or the
    server moves it 3 %, and this machine's other work causes one now and then (on a quiet machine, one
    cell of 26 in a run came out 2.4 % below its other runs). A launch that misses runs once more; a
    shortfall of the simulator's own misses every time."""
    cells = [c for c in CELLS if tree_key(c.tree) == launch]
    tries = []
    for attempt in range(2):
        errors = replay(launch, cells, tmp_path / f"try{attempt}")
        tries.append({batch: f"{100 * e:+.2f} %" for batch, e in errors.items()})
        if all(abs(e) <= TOLERANCE for e in errors.values()):
            return
        log.warning("%s missed by more than %.0f %%: %s", launch, 100 * TOLERANCE, tries[-1])
    pytest.fail(f"{launch}: simulated tok/s against the H200's, per concurrency, in each run: {tries}")
