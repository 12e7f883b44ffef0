"""The start-up phases a trial shows, read from real SGLang logs: each phase once, the draft's weights told
as the draft's.

Seen on an H100 sweep of the real pair (SGLang 0.5.17): the console said "loading weights" and "allocating
the KV cache" twice, since 0.5.17 loads the draft right after the target's weights, before any CUDA graph,
where the phase rule looked for the draft only after the target's graphs (0.5.9's order).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.engines.logrecords import LogEvent
from orchestrator.engines.sglang.engine import SGLANG
from orchestrator.trial_events import Phase, startup_phase

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "sglang"
LOGS = [
    "0.5.9/ok.log",
    "0.5.14/ok.log",
    "0.5.17/ok.log",
    "0.5.17/smollm2-sweep-h100/trials/0001/server.log",
    "0.5.17/smollm2-sweep-h100/trials/0000/server.log",
    "0.5.23/ok.log",
]


def phases_of(log: Path) -> list[Phase]:
    """The phases in the order a trial enters them, fed the log line by line as `watch_startup` is."""
    parser = SGLANG.log_parser()
    current: Phase | None = None
    seen: list[Phase] = []
    for line in log.read_text().splitlines():
        if parser.feed(line) is LogEvent.READY:  # ready: the trial's own phases take over
            break
        phase = startup_phase(parser.report().last_stage, current)
        if phase is not current:
            seen.append(phase)
            current = phase
    return seen


@pytest.mark.parametrize("name", LOGS)
def test_each_start_up_phase_is_entered_once(name: str) -> None:
    log = FIXTURES / name
    seen = phases_of(log)
    assert len(seen) == len(set(seen)), seen
    draft = "LlamaForCausalLMEagle3" in log.read_text()
    assert (Phase.DRAFT_MODEL in seen) == draft, seen
    assert seen[:2] == [Phase.LAUNCH, Phase.LOADING_WEIGHTS]
