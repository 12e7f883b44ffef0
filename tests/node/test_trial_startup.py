"""The start-up watch reports every stage the log passes through, in order, however many lines one poll
reads: the progress line showed no `capturing CUDA graphs` for a server whose capture and warm-up lines
came within one poll (the baseline at a high fraction, with its prefill graphs skipped)."""

from __future__ import annotations

import time
from pathlib import Path

from orchestrator.engines import engine_for
from orchestrator.node.trial_startup import watch_startup
from orchestrator.records import FailureStage
from orchestrator.spec.sweep_spec import TimeoutSpec

LOG = Path(__file__).resolve().parents[1] / "fixtures" / "sglang" / "0.5.17" / "ok.log"


class Running:
    """The server process as the watch sees it: running, started now (its log is already complete)."""

    started_at = time.monotonic()

    def poll(self) -> int | None:
        return None


def stages_line_by_line(text: str) -> list[FailureStage]:
    parser = engine_for("sglang").log_parser()
    seen: list[FailureStage] = []
    for line in text.splitlines(keepends=True):
        parser.feed(line, 0.0)
        stage = parser.report().last_stage
        if not seen or seen[-1] is not stage:
            seen.append(stage)
    return seen


def test_every_stage_of_a_log_read_in_one_poll_is_heard_in_order(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    text = LOG.read_text()
    log.write_text(text)  # the whole start-up before the first poll
    heard: list[FailureStage] = []
    startup = watch_startup(
        Running(),  # type: ignore[arg-type]
        log,
        engine_for("sglang").log_parser(),
        TimeoutSpec(),
        time.monotonic(),
        lambda stage: heard.append(stage) if not heard or heard[-1] is not stage else None,
    )
    assert startup.ready
    expected = stages_line_by_line(text)
    assert expected[-1] is FailureStage.UNDER_LOAD  # the ready line: the trial's own phases follow it
    expected = expected[:-1]
    assert FailureStage.TARGET_GRAPH_CAPTURE in expected and len(expected) >= 3, expected
    assert heard == expected
