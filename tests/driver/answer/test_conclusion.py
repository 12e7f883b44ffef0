"""The end of a sweep without a cluster: what it writes and says when there is an answer, when an earlier
invocation's answer stands, and when there is none to give."""

from __future__ import annotations

from pathlib import Path

from orchestrator.driver.answer.best_file import BEST_JSON, BestFile
from orchestrator.driver.answer.conclusion import BEST_METRIC, conclude
from orchestrator.mlflow_schema import Tag
from orchestrator.spec.sweep_spec import load_spec
from tests.driver.answer.test_answer import config, h200_8b, rec

DEMO = Path(__file__).resolve().parents[3] / "trials" / "demo.yaml"


def test_the_answer_is_written_said_and_handed_to_the_parent_run(tmp_path: Path) -> None:
    concluded = conclude(h200_8b(), load_spec(DEMO), tmp_path)
    best = BestFile.read(tmp_path)
    assert best is not None and best == concluded.best and best.launches == [4]
    assert concluded.lines[0] == "\nbest: trial 4, 3078.9 tok/s, " + config(256).label()
    assert concluded.lines[1] == f"confidence: {best.verdict.statement}"
    assert concluded.parent_metrics() == {BEST_METRIC: 3078.9}
    assert concluded.parent_tags()[Tag.ANSWER_LAUNCHES.value] == "4"
    assert [p.name for p in concluded.written] == [BEST_JSON, "best_command.sh"]


def test_an_earlier_answer_stands_when_nothing_launched_now_beats_it(tmp_path: Path) -> None:
    spec = load_spec(DEMO)
    earlier = conclude(h200_8b(), spec, tmp_path).best
    assert earlier is not None
    before = (tmp_path / BEST_JSON).read_text()
    # --resume without every earlier launch in the journal: only this invocation's launches are known.
    now = [rec(9, config(32, 2), 1500.0)]
    concluded = conclude(now, spec, tmp_path, earlier=earlier, journal_complete=False)
    assert concluded.earlier_stands and concluded.best == earlier and concluded.written == ()
    assert "(an earlier invocation's answer): nothing launched now beat it" in concluded.lines[0]
    assert (tmp_path / BEST_JSON).read_text() == before
    assert concluded.parent_metrics() == {BEST_METRIC: 3078.9}
    # A launch now that beats it is the new answer.
    faster = conclude(
        [rec(10, config(32, 2), 3500.0)], spec, tmp_path, earlier=earlier, journal_complete=False
    )
    assert faster.best is not None and faster.best.launches == [10]


def test_no_answer_writes_no_best_json_and_says_why(tmp_path: Path) -> None:
    spec = load_spec(DEMO)
    lossy = conclude([rec(1, config(64), 1000.0)], spec, tmp_path, lossy={1})
    assert lossy.best is None and "passed the lossless check (1 lossy)" in lossy.lines[0]
    assert conclude([], spec, tmp_path).lines[0].startswith("no speculative configuration completed")
    assert not (tmp_path / BEST_JSON).exists()
    assert lossy.parent_metrics() == {} and lossy.parent_tags() == {}
