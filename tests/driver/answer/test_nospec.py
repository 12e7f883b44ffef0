"""The server without speculation as a candidate answer: the issue's H200 figures (5011.6 tok/s without
speculation against 2323 for the best speculative configuration, a dummy draft) and a baseline within the
noise of the speculative leader."""

from __future__ import annotations

from pathlib import Path

from orchestrator.driver.answer.best_file import BestFile
from orchestrator.driver.answer.choose import Call, answer_launches, baseline_launches, choose_answer
from orchestrator.driver.answer.conclusion import conclude, nospec_lines
from orchestrator.driver.answer.summary import write_best
from orchestrator.mlflow_schema import Tag
from orchestrator.records import TrialStatus
from orchestrator.spec.search import make_config
from orchestrator.spec.sweep_spec import load_spec
from tests.driver.answer.test_answer import config, h200_8b, rec

BASE = make_config(0.9, 256, 256)
DEMO = Path(__file__).resolve().parents[3] / "trials" / "demo.yaml"


def test_a_baseline_far_ahead_is_the_answer_with_the_verdict_against_the_best_speculative_one() -> None:
    records = [rec(0, BASE, 5011.6, baseline=True), rec(1, config(256), 2323.0), rec(2, config(64), 1900.0)]
    answer = choose_answer(answer_launches(records), baseline_launches(records))
    assert answer is not None and answer.nospec
    assert answer.launches == (0,) and answer.median == 5011.6 and answer.config == BASE.label()
    v = answer.verdict
    assert v.call is Call.CLEARLY_AHEAD and v.runner_up == [1] and v.runner_up_median == 2323.0
    assert v.statement.startswith("1 launch each: the server without speculation (trial 0) is 115.7 % ahead")
    assert answer.versus_nospec is None
    # Without the baseline's launches it is today's answer: the best speculative configuration.
    speculative = choose_answer(answer_launches(records))
    assert speculative is not None and not speculative.nospec and speculative.launches == (1,)


def test_a_baseline_ahead_within_the_noise_is_the_answer_with_a_too_close_verdict() -> None:
    # 0.7 % above the leader (3078.9): within the 3.4 % noise alone opens between two launches. It is
    # still the faster one measured (and the leader's figure is the best of several draws): the answer
    # is the server without speculation, and its verdict says the lead is too close to call.
    records = [rec(0, BASE, 3100.0, baseline=True), *h200_8b()]
    answer = choose_answer(answer_launches(records), baseline_launches(records))
    assert answer is not None and answer.nospec and answer.launches == (0,)
    assert answer.verdict.call is Call.TOO_CLOSE and answer.verdict.runner_up == [4]
    assert "the server without speculation (trial 0) is 0.7 % ahead of trial 4" in answer.verdict.statement
    # Behind the leader: the speculative answer, clearly ahead of the server without speculation.
    slower = [rec(0, BASE, 2000.0, baseline=True), *h200_8b()]
    answer = choose_answer(answer_launches(slower), baseline_launches(slower))
    assert answer is not None and not answer.nospec and answer.versus_nospec is not None
    assert answer.versus_nospec.call is Call.CLEARLY_AHEAD
    assert (
        "trial 4 is 53.9 % ahead of the server without speculation (trial 0)"
        in answer.versus_nospec.statement
    )


def test_the_console_says_a_lead_within_the_noise_is_too_close_and_how_to_tell(tmp_path: Path) -> None:
    records = [rec(0, BASE, 3100.0, baseline=True), *h200_8b()]
    answer = choose_answer(answer_launches(records), baseline_launches(records))
    assert answer is not None
    best, _ = write_best(answer, records, load_spec(DEMO), tmp_path)
    (line,) = nospec_lines(best)
    assert line.startswith("speculation does not pay here: without it the server measured 3100.0 tok/s")
    assert "within the" in line and "too close to call" in line and "beyond" not in line
    far = [rec(0, BASE, 5011.6, baseline=True), *h200_8b()]
    answer = choose_answer(answer_launches(far), baseline_launches(far))
    assert answer is not None
    best, _ = write_best(answer, far, load_spec(DEMO), tmp_path)
    assert "beyond the" in nospec_lines(best)[0]


def test_with_only_the_baseline_measured_the_answer_is_the_server_without_speculation() -> None:
    # The first launch of a sweep is the baseline; on a shape where speculation never pays (the H200's
    # dummy drafts, a weak draft under heavy load) it is the optimum. Answering nothing until a
    # speculative launch completes made the answer right only from the second launch on, and a sweep
    # whose every speculative launch failed gave the user no command at all.
    records = [rec(0, BASE, 1977.6, baseline=True), rec(1, config(64), None, status=TrialStatus.OOM)]
    answer = choose_answer(answer_launches(records), baseline_launches(records))
    assert answer is not None and answer.nospec and answer.launches == (0,) and answer.median == 1977.6
    assert answer.config == BASE.label() and answer.comparison is None and answer.versus_nospec is None
    v = answer.verdict
    assert v.call is Call.ALONE and v.runner_up == [] and v.gap is None
    assert v.statement.startswith("the server without speculation (trial 0): 1977.6 tok/s; no speculative")
    # Nothing measured at all is still no answer.
    assert choose_answer(answer_launches(records[1:]), baseline_launches(records[1:])) is None


def test_the_console_and_best_json_say_why_the_baseline_stands_alone(tmp_path: Path) -> None:
    spec = load_spec(DEMO)
    records = [rec(0, BASE, 1977.6, baseline=True), rec(1, config(64), None, status=TrialStatus.FAILED)]
    concluded = conclude(records, spec, tmp_path)
    best = BestFile.read(tmp_path)
    assert best is not None and best == concluded.best and best.nospec and best.launches == [0]
    assert not any(a.startswith("--speculative") for a in best.command)
    assert concluded.lines[0] == f"\nbest: serve without speculation: trial 0, 1977.6 tok/s, {BASE.label()}"
    assert concluded.lines[1].startswith("no speculative configuration completed")
    assert "serve without speculation" in concluded.lines[1]
    assert concluded.parent_tags()[Tag.ANSWER_SPECULATION.value] == "off"
    # Every speculative launch lossy: the same answer, and the line says the draft changed the output.
    lossy = conclude([*records[:1], rec(2, config(64), 2500.0)], spec, tmp_path, lossy={2})
    assert lossy.best is not None and lossy.best.nospec and lossy.best.launches == [0]
    assert "passed the lossless check (1 lossy)" in lossy.lines[1]


def test_a_sweep_that_launched_no_speculation_says_so_and_blames_no_draft(tmp_path: Path) -> None:
    """Seen after `--time-budget 40`: only the baseline ran, and the console said "no speculative
    configuration completed ... until the draft or the configuration is fixed", of a draft never launched."""
    concluded = conclude([rec(0, BASE, 1977.6, baseline=True)], load_spec(DEMO), tmp_path)
    line = concluded.lines[1]
    assert line.startswith("no speculative configuration was launched"), line
    assert "draft" not in line and "--resume" in line, line


def test_one_speculative_configuration_beside_the_baseline_is_alone_among_speculative_ones() -> None:
    """Seen with `--trials 1`: "confidence: trial 1: 1022.0 tok/s; no other configuration completed", where
    the baseline (trial 0) had completed and was compared on the line before."""
    records = [rec(0, BASE, 900.0, baseline=True), rec(1, config(256), 1022.0)]
    answer = choose_answer(answer_launches(records), baseline_launches(records))
    assert answer is not None and not answer.nospec and answer.versus_nospec is not None
    assert answer.verdict.call is Call.ALONE
    assert "no other speculative configuration completed" in answer.verdict.statement
