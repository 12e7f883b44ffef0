"""A diagnosis names values the search can launch with: snapped to the field's grid, toward safety."""

from __future__ import annotations

import re

from orchestrator.driver.memory.learned import MemoryModel
from orchestrator.driver.search.diagnosis import diagnose
from orchestrator.driver.search.grid import at_least, at_most
from orchestrator.records import TrialStatus
from orchestrator.spec.search import Choices, FloatRange, IntRange, SearchSpace, grid_values
from tests.driver.memory.test_memory_model import result_from_log


def space(fraction: FloatRange, graph_bs: Choices | IntRange) -> SearchSpace:
    return SearchSpace(
        mem_fraction_static=fraction,
        cuda_graph_max_bs=graph_bs,
        max_running_requests=Choices(choices=[16, 512]),
        speculative_num_steps=IntRange(low=1, high=5),
        speculative_eagle_topk=Choices(choices=[1]),
        speculative_num_draft_tokens=IntRange(low=2, high=6),
    )


def test_grid_helpers() -> None:
    assert grid_values(FloatRange(low=0.7, high=0.75, step=0.01)) == [0.7, 0.71, 0.72, 0.73, 0.74, 0.75]
    assert at_most(Choices(choices=[64, 128, 256, 512]), 65) == 64
    assert at_most(Choices(choices=[64, 128]), 63) is None
    assert at_most(IntRange(low=8, high=64, step=8), 65) == 64
    assert at_least(FloatRange(low=0.7, high=0.95, step=0.05), 0.81) == 0.85


def test_graph_oom_advice_is_on_the_grid() -> None:
    model = MemoryModel()
    model.observe(0, result_from_log("ok.log", (0.85, 16, 16, 3, 1, 4), TrialStatus.OK))
    oom = result_from_log("graph-oom.log", (0.99, 512, 512, 3, 1, 4), TrialStatus.OOM)
    model.observe(1, oom)
    off_grid = diagnose(oom, model)
    grid = space(FloatRange(low=0.70, high=0.99, step=0.05), Choices(choices=[16, 64, 128, 256, 512]))
    text = diagnose(oom, model, search=grid)
    assert off_grid != text
    fractions = [float(v) for v in re.findall(r"mem_fraction_static to (\d+(?:\.\d+)?)", text)]
    sizes = [int(v) for v in re.findall(r"cuda_graph_max_bs to (\d+)", text)]
    assert fractions or sizes, text
    allowed_f = {round(0.70 + 0.05 * i, 2) for i in range(6)}
    assert all(round(f, 2) in allowed_f for f in fractions), text
    assert all(s in {16, 64, 128, 256} for s in sizes), text
