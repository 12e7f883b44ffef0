from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import optuna
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

from orchestrator import report
from orchestrator.driver.answer.best_file import BestFile
from orchestrator.driver.answer.choose import Call, Verdict
from orchestrator.driver.answer.noise import NoiseSource, Regime
from orchestrator.engines.shell import shell_command, shell_script
from orchestrator.mlflow_schema import Metric, memory_from_metrics, parse_param
from orchestrator.report import best_so_far, load_trials, pareto_front, write_report
from orchestrator.report.answer import find_best, script_command
from orchestrator.report.data import Outcome, RunReadBack, current_sweeps, outcome_of
from orchestrator.report.importances import importances_of
from orchestrator.report.plots import LABELS, STYLE, feasibility_figure, history_figure, latency_figure
from orchestrator.spec.search import make_config
from tests.report_fixture import BEST, CRASH_MESSAGE, DIAGNOSIS, MEMORY, PLAN, STUDY, Store, build_store

PLOT_IDS = ("plot-feasibility", "plot-pareto", "plot-acceptance", "plot-history", "plot-importance")
SECTIONS = ("best", "memory", "feasibility", "latency", "acceptance", "history", "importance", "trials")


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    return build_store(tmp_path_factory.mktemp("report"))


@pytest.fixture(scope="module")
def rows(store: Store) -> list[RunReadBack]:
    return load_trials(store.tracking_uri, STUDY)


# -- pure shaping ----------------------------------------------------------------------------------------


def test_pareto_front_keeps_only_undominated_points_ordered_by_latency() -> None:
    # (latency, tok/s): 1 beats 3 (faster and more), 4 is beaten by 2 (same latency, fewer tok/s)
    points = [(10.0, 100.0), (20.0, 300.0), (30.0, 200.0), (15.0, 50.0), (20.0, 250.0), (5.0, 80.0)]
    assert pareto_front(points) == [5, 0, 1]


def test_pareto_front_edges() -> None:
    assert pareto_front([]) == []
    assert pareto_front([(1.0, 1.0)]) == [0]
    assert pareto_front([(1.0, 1.0), (1.0, 1.0)]) == [0, 1]  # equal points do not dominate each other
    assert pareto_front([(1.0, 5.0), (2.0, 5.0)]) == [0]  # same tok/s, slower: dominated


def test_best_so_far_is_a_running_maximum_that_skips_missing_values() -> None:
    assert best_so_far([None, 3.0, None, 2.0, 5.0, 4.0]) == [None, 3.0, 3.0, 3.0, 5.0, 5.0]


def test_current_sweeps_follows_resumes_back_to_the_last_fresh_start() -> None:
    parents = [("a", 1, False), ("b", 2, True), ("c", 3, False), ("d", 4, True), ("e", 5, True)]
    assert current_sweeps(parents) == {"c", "d", "e"}
    assert current_sweeps([("x", 9, True)]) == {"x"}
    assert current_sweeps([]) == set()


def test_outcome_and_params_parsing() -> None:
    assert outcome_of("ok") is Outcome.FEASIBLE
    assert {outcome_of(s) for s in ("oom", "oom_under_load", "kv_pressure")} == {Outcome.OOM}
    assert outcome_of("predicted_oom") is Outcome.PREDICTED_OOM
    assert outcome_of("sla_missed") is Outcome.SLA_MISSED  # shown as such, neither feasible nor a crash
    assert {outcome_of(s) for s in ("failed", "timeout", "lost", "nonsense")} == {Outcome.FAILED}
    # Stopped by the driver (Ctrl-C, kill): neither a failure of the configuration nor a lost node.
    assert outcome_of("interrupted") is Outcome.INTERRUPTED
    assert (
        "interrupted" in STYLE[Outcome.INTERRUPTED]["name"]
        and "interrupted" not in STYLE[Outcome.FAILED]["name"]
    )
    assert parse_param("16") == 16 and isinstance(parse_param("16"), int)
    assert parse_param("0.85") == 0.85
    assert parse_param("EAGLE3") == "EAGLE3" and parse_param("nan") == "nan"


def test_memory_from_metrics_keeps_the_logs_figures_in_the_logs_order() -> None:
    metrics = {
        "output_tok_per_s": 1.0,
        "avail_end_gb": 8.0,
        "weights_gb": 16.0,
        "kv_cache_tokens": 5e5,
        "resolved_mem_fraction_static": 0.8,
        "trial_wall_s": 60.0,
        "gpu_total_mib": 143771.0,
    }
    memory = memory_from_metrics(metrics)
    assert list(memory) == ["weights_gb", "kv_cache_tokens", "avail_end_gb", "gpu_total_mib"]


def test_a_launch_scripts_command_is_shown_as_the_tracker_wrote_it() -> None:
    argv = (
        "python",
        "-m",
        "sglang.launch_server",
        "--model-path",
        "/m/a b",
        "--enable-metrics",
        "--port",
        "1",
    )
    assert script_command(shell_script(argv)) == shell_command(argv)


# -- MLflow and Optuna ---------------------------------------------------------------------------------


def test_load_trials_reads_the_current_sweep_one_row_per_trial(rows: list[RunReadBack]) -> None:
    assert [r.number for r in rows] == [p.number for p in PLAN]  # the older sweep's trial 1 is left out
    by = {r.number: r for r in rows}
    assert by[1].config != "stale" and by[1].status == "ok"
    assert by[0].baseline and not by[1].baseline
    assert by[BEST].params["mem_fraction_static"] == pytest.approx(0.88)
    assert by[BEST].params["cuda_graph_max_bs"] == 128
    assert by[BEST].tok_s == pytest.approx(2100.0) and by[BEST].accept_length == pytest.approx(3.4)
    assert by[BEST].metrics["itl_p99_ms"] == pytest.approx(18.0)
    assert by[4].status == "oom" and by[4].outcome is Outcome.OOM
    assert by[4].failure_stage == "target_graph_capture" and by[4].diagnosis == DIAGNOSIS
    assert by[5].outcome is Outcome.PREDICTED_OOM
    assert by[6].failure_message == CRASH_MESSAGE and by[6].outcome is Outcome.FAILED
    assert by[7].pruned_at_stage == 1
    assert by[0].value("speculative_num_steps") is None


def test_find_best_without_best_json_makes_the_sweeps_choice_from_the_runs(
    rows: list[RunReadBack], store: Store, tmp_path: Path
) -> None:
    best = find_best(rows, tmp_path, store.tracking_uri)  # no best.json there
    assert best is not None and best.row.number == BEST
    assert best.launches == (BEST,) and best.median_tok_per_s == pytest.approx(2100.0)
    assert "--mem-fraction-static 0.88" in best.command and "launch_command.sh" in best.command_source
    assert dict(best.memory) == pytest.approx(MEMORY)


def best_file(label: str, argv: list[str], verdict: Verdict | None = None) -> BestFile:
    config = next(p.config for p in PLAN if p.number == BEST)
    return BestFile(
        config_label=label,
        config=BestFile.config_fields(config),
        launches=[BEST],
        launch_tok_per_s=[2100.0],
        median_tok_per_s=2100.0,
        trial=BEST,
        verdict=verdict
        or Verdict(
            call=Call.ALONE,
            statement="alone",
            noise_source=NoiseSource.PRIOR,
            regime=Regime.GPU_BOUND,
            launch_sd=0.012,
        ),
        command=argv,
        memory={"x_gb": 1.5},
    )


def test_find_best_prefers_best_json_but_not_a_stale_one(
    rows: list[RunReadBack], store: Store, tmp_path: Path
) -> None:
    label = next(p.config for p in PLAN if p.number == BEST).label()
    argv = ["python", "-m", "sglang.launch_server", "--tp-size", "8", "--api-key", "***"]
    best_file(label, argv).write(tmp_path)
    best = find_best(rows, tmp_path, store.tracking_uri)
    assert best is not None and best.command_source == "best.json" and "--tp-size 8" in best.command
    assert best.memory == (("x_gib", 1.5),)  # written with the log's `_gb` name: read as what it is, GiB
    # An older study's best.json: a trial of the same number, another configuration.
    stale = tmp_path / "stale"
    stale.mkdir()
    best_file(make_config(0.88, 8, 128, 5, 4, 8).label(), argv).write(stale)
    best = find_best(rows, stale, store.tracking_uri)
    assert best is not None and best.command_source != "best.json" and "--tp-size 8" not in best.command


def test_the_best_section_states_the_answer_and_the_verdict_of_best_json(
    rows: list[RunReadBack], store: Store, tmp_path: Path
) -> None:
    from orchestrator.report.sections import best_section

    label = next(p.config for p in PLAN if p.number == BEST).label()
    argv = ["python", "-m", "sglang.launch_server", "--tp-size", "8"]
    close = Verdict(
        call=Call.TOO_CLOSE,
        statement="1 launch each: trial 2 is 1.0 % ahead of trial 1; ... so too close to call",
        noise_source=NoiseSource.PRIOR,
        regime=Regime.OVERHEAD_BOUND,
        launch_sd=0.11,
        too_close_with=[1],
    )
    best_file(label, argv, close).write(tmp_path)
    best = find_best(rows, tmp_path, store.tracking_uri)
    assert best is not None and best.verdict == close
    html_text = best_section(best)
    assert "so too close to call" in html_text and 'class="note" id="verdict"' in html_text
    assert f"1 ({BEST})" in html_text and label in html_text
    assert "interval" not in html_text  # none from a prior


@pytest.mark.parametrize(
    ("call", "lossy", "says"),
    [
        (Call.CLEARLY_AHEAD, 0, "leads the best speculative configuration beyond the noise"),
        (Call.TOO_CLOSE, 0, "leads the best speculative configuration within the noise"),
        (Call.ALONE, 0, "no speculative configuration completed"),
        (Call.ALONE, 1, 'passed the lossless check (1 lossy: the greedy output differed from the server '
         'without speculation; see <a href="#traffic">'),
    ],
)  # fmt: skip
def test_the_no_speculation_note_says_why_by_its_verdict(
    rows: list[RunReadBack], call: Call, lossy: int, says: str
) -> None:
    # The note once said "beyond the noise" of every answer without speculation, a lead too close to call
    # and a baseline with nothing to compare against included. On the real pair the console said "no
    # speculative configuration passed the lossless check (1 lossy)" while the report said only that none
    # "completed a benchmark that can be recommended".
    from orchestrator.report.sections import best_section

    verdict = Verdict(
        call=call, statement="...", noise_source=NoiseSource.PRIOR, regime=Regime.GPU_BOUND, launch_sd=0.01
    )
    best = report.answer.BestConfig(
        rows[0], "python -m sglang.launch_server", "", (), verdict=verdict, nospec=True, lossy=lossy
    )
    note = re.search(r'<p class="note" id="nospec">(.*?)</p>', best_section(best))
    assert note is not None and says in note.group(1)


def test_importances_cover_the_conditional_speculative_values(store: Store) -> None:
    trials = optuna.load_study(study_name=STUDY, storage=store.storage).get_trials()
    result = importances_of(trials)
    names = dict(result.values)
    # draft tokens is derived for top-k 1 and has a range that depends on steps: still assessed
    assert "speculative_num_draft_tokens" in names and "cuda_graph_max_bs" in names
    assert sum(names.values()) == pytest.approx(1.0)
    assert "baseline is left out" in result.note


def test_importances_leave_out_the_fraction_the_memory_model_sets_for_each_tree(store: Store) -> None:
    # Seen in the demo: mem_fraction_static ranked second (0.23), though the proposal policy sets it from
    # the memory model for each tree (`proposal.structure`): it tracks the tree, it was not searched.
    result = importances_of(optuna.load_study(study_name=STUDY, storage=store.storage).get_trials())
    assert result.values and "mem_fraction_static" not in dict(result.values)
    assert "mem_fraction_static" in result.note and "set by the memory model for each tree" in result.note
    ranked = result.note[result.note.index("Ranked:") :]
    assert all(LABELS[n] in ranked.split(".")[0] for n, _ in result.values)


def test_importances_with_too_few_trials_say_so() -> None:
    dists = {
        "mem_fraction_static": FloatDistribution(0.7, 0.9),
        "speculative_num_steps": IntDistribution(1, 5),
    }
    one = optuna.trial.create_trial(
        params={"mem_fraction_static": 0.8, "speculative_num_steps": 3}, distributions=dists, value=1.0
    )
    result = importances_of([one])
    assert result.values == () and "at least 3" in result.note and "has 1" in result.note
    assert importances_of([]).values == ()
    # enough trials, but all alike: nothing to attribute
    topk = {"speculative_eagle_topk": CategoricalDistribution([1, 2])}
    same = [
        optuna.trial.create_trial(
            params={"mem_fraction_static": 0.8, "speculative_num_steps": 3, "speculative_eagle_topk": 2},
            distributions={**dists, **topk},
            value=float(v),
        )
        for v in range(4)
    ]
    assert importances_of(same).values == ()


# -- figures ---------------------------------------------------------------------------------------------


def test_feasibility_map_draws_each_outcome_with_its_own_symbol(rows: list[RunReadBack]) -> None:
    fig = feasibility_figure(rows)
    first = [t for t in fig.data if t.xaxis == "x"]  # the mem_fraction_static / cuda_graph_max_bs panel
    symbols = {t.legendgroup: t.marker.symbol for t in first}
    none_here = {Outcome.SLA_MISSED, Outcome.INTERRUPTED}  # none in the fixture
    assert set(symbols) == {o.value for o in Outcome if o not in none_here}
    assert len(set(symbols.values())) == 4
    feasible = next(t for t in first if t.legendgroup == "feasible")
    assert sorted(feasible.marker.color) == sorted(p.tok_s for p in PLAN if p.tok_s)
    oom = next(t for t in first if t.legendgroup == "oom")
    assert list(oom.x) == [0.95] and list(oom.y) == [512]


def test_a_trial_that_missed_its_sla_or_was_interrupted_is_drawn_as_such(rows: list[RunReadBack]) -> None:
    import dataclasses

    # Seen: an interrupted trial drawn as "failed / timeout / lost".
    missed = dataclasses.replace(rows[1], status="sla_missed")
    stopped = dataclasses.replace(rows[2], status="interrupted")
    fig = feasibility_figure([*rows, missed, stopped])
    first = [t for t in fig.data if t.xaxis == "x"]
    symbols = {t.legendgroup: t.marker.symbol for t in first}
    assert set(symbols) == {o.value for o in Outcome}
    assert len(set(symbols.values())) == 6
    drawn = next(t for t in first if t.legendgroup == "interrupted")
    assert drawn.name.startswith("interrupted") and len(drawn.x) == 1


def test_latency_figure_draws_the_pareto_front(rows: list[RunReadBack]) -> None:
    fig = latency_figure(rows)
    front = [t for t in fig.data if t.name == "Pareto front"]
    assert len(front) == 2
    # ITL: 9 ms/1000 (baseline), 10/1500, 12/1800, 18/2100 are the front; 20/1200 is dominated
    assert list(front[0].x) == [9.0, 10.0, 12.0, 18.0]
    assert list(front[0].y) == [1000.0, 1500.0, 1800.0, 2100.0]


def _answer_line(rows: list[RunReadBack]) -> tuple[list[int], list[float]]:
    # Seen: "best so far (the answer's median)" over a line that fell three times on the demo-chat sweep,
    # as the answer (re-chosen by its own rule after each trial) does: the legend says what it draws.
    line = next(t for t in history_figure(rows).data if t.name == "the answer after each trial (its median)")
    return list(line.x), list(line.y)


def test_history_best_so_far_line(rows: list[RunReadBack]) -> None:
    # From trial 0 on: the baseline (1000 tok/s) is the answer until a speculative configuration completes
    assert _answer_line(rows) == (
        [0, 1, 2, 3, 4, 5, 6, 7],
        [1000.0, 1800.0, 2100.0, 2100.0, 2100.0, 2100.0, 2100.0, 2100.0],
    )


def test_history_best_so_far_line_ends_at_the_answer_not_at_one_launchs_maximum(
    rows: list[RunReadBack],
) -> None:
    # Seen: the line ended at 1056.7 (one launch) where the answer was the median 1043.3 of its launches.
    best = next(r for r in rows if r.number == 2)
    again = dataclasses.replace(
        best, number=8, run_id="again", metrics={**best.metrics, Metric.OBJECTIVE.value: 2240.0}
    )
    x, y = _answer_line([*rows, again])
    assert x[-1] == 8 and y[-1] == (2100.0 + 2240.0) / 2  # not 2240.0
    # A baseline far ahead is the answer, and the line follows it.
    base = next(r for r in rows if r.baseline)
    fast = dataclasses.replace(base, metrics={**base.metrics, Metric.OBJECTIVE.value: 5000.0})
    x, y = _answer_line([fast, *(r for r in rows if not r.baseline)])
    assert y[-1] == 5000.0


def test_history_marks_the_final_answer_where_a_last_drop_would_hide_it(rows: list[RunReadBack]) -> None:
    """Seen on the demo: the answer fell from 1085.6 to 1071.2 after the last trial; on a step line that
    is a vertical drop at the last x, under that trial's marker, so the last level one could see was not
    the answer the console, best.json and MLflow gave."""
    best = next(r for r in rows if r.number == 2)
    lower = dataclasses.replace(
        best, number=8, run_id="lower", metrics={**best.metrics, Metric.OBJECTIVE.value: 1900.0}
    )
    fig = history_figure([*rows, lower])
    _, y = _answer_line([*rows, lower])
    assert y[-2] > y[-1]  # the answer fell with the last trial
    final = next(t for t in fig.data if t.name.startswith("the answer:"))
    assert list(final.x) == [8] and list(final.y) == [y[-1]]
    assert final.name == f"the answer: {y[-1]:.1f} tok/s"  # in the legend, where no marker hides it
    assert fig.data[-1] is final  # drawn last: over the trial's own marker


# -- the page --------------------------------------------------------------------------------------------


def test_write_report_is_one_self_contained_page(store: Store) -> None:
    out = write_report(STUDY, store.tracking_uri, store.storage, store.study_dir / "report.html")
    text = out.read_text()
    assert not re.search(r"<script[^>]+src=", text), "the page must open offline"
    assert not re.search(r"<link[^>]+href=\"http", text)
    assert text.count("Plotly.newPlot(") == len(PLOT_IDS)
    assert text.count('<script type="text/javascript">') == 1  # plotly.js once, in <head>
    for sid in SECTIONS:
        assert f'<section id="{sid}">' in text
    for pid in PLOT_IDS:
        assert f'id="{pid}"' in text
    best_cmd = re.search(r'<pre id="best-command">(.*?)</pre>', text, re.S)
    assert best_cmd is not None and "--cuda-graph-max-bs 128" in best_cmd.group(1)
    memory = text[text.index('<section id="memory">') : text.index('<section id="feasibility">')]
    assert "kv_cache_tokens" in memory and "512,000" in memory and "draft_graph_gb" in memory
    # the log's "GB" figures are GiB: labelled as `specsweep fit` and the sweep's messages label them
    assert ">GiB<" in memory and ">GB<" not in memory
    trials = text[text.index('<section id="trials">') :]
    assert trials.count('<tr class="') == len(PLAN)
    assert DIAGNOSIS in trials and "RuntimeError: boom" in trials and "predicted_oom" in trials


def test_report_notes_missing_importances(store: Store, tmp_path: Path) -> None:
    out = write_report(STUDY, store.tracking_uri, f"sqlite:///{tmp_path / 'none.db'}", tmp_path / "r.html")
    text = out.read_text()
    assert 'id="plot-importance"' not in text and "No Optuna storage" in text
    assert not (tmp_path / "none.db").exists()


def test_cli_writes_under_out_and_fails_cleanly_without_a_store(
    store: Store, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = store.study_dir.parent
    assert report.main([STUDY, "--out", str(root)]) == 0
    assert (root / STUDY / "report.html").exists()
    assert report.main([STUDY, "--out", str(tmp_path)]) == 2
    assert "no MLflow store" in capsys.readouterr().err
    assert not (tmp_path / "mlflow.db").exists()


def test_searched_values_name_flags_as_the_version_in_use_spells_them(store: Store) -> None:
    text = write_report(STUDY, store.tracking_uri, store.storage, store.study_dir / "flags.html").read_text()
    best = text[text.index("<h3>Searched values</h3>") : text.index("<h3>Launch command")]
    # the fixture's trials ran on SGLang 0.5.17, where the graph flag is --cuda-graph-max-bs-decode
    assert "--cuda-graph-max-bs-decode" in best and "--mem-fraction-static" in best
    assert "--cuda-graph-max-bs<" not in best


def test_feasibility_map_integer_axes_have_integer_ticks(rows: list[RunReadBack]) -> None:
    layout = feasibility_figure(rows).layout
    # panel 6 is speculative steps / top-k; panel 1 has the fraction on x and the graph batch size on y
    for axis in (layout.xaxis6, layout.yaxis6, layout.yaxis):
        assert axis.tickvals, axis
        assert all(float(v).is_integer() for v in axis.tickvals), axis.tickvals
    assert layout.xaxis.tickvals is None  # mem_fraction_static: plotly's own ticks


def test_a_fraction_every_point_of_a_panel_shares_gets_a_narrow_axis_not_plotly_s_0_to_2() -> None:
    """The QwQ-32B sweep on the H200: the baseline at 0.83, every tree at 0.97. The panels with draft
    tokens hold only the trees, one fraction: plotly's own range for a single value is that value +- 1,
    the point alone in the middle of an axis from 0 to 2."""

    def run(number: int, fraction: float, draft: int | None) -> RunReadBack:
        params: dict[str, float | str] = {"mem_fraction_static": fraction, "cuda_graph_max_bs": 32.0}
        if draft is not None:
            params["speculative_num_draft_tokens"] = float(draft)
        metrics = {Metric.OUTPUT_TOK_PER_S.value: 700.0 + number}
        return RunReadBack(
            number, f"r{number}", "ok", f"run {number}", params, metrics, baseline=draft is None
        )

    layout = feasibility_figure(
        [run(0, 0.83, None), *(run(n, 0.97, d) for n, d in ((1, 4), (2, 2), (3, 8)))]
    ).layout
    low, high = layout.xaxis4.range  # mem_fraction_static / draft tokens
    assert 0.9 < low < 0.97 < high < 1.0, (low, high)
    assert layout.xaxis.range is None  # two fractions: plotly's own range


def test_a_speculative_answer_is_set_against_no_speculation_before_its_runner_up(
    rows: list[RunReadBack],
) -> None:
    """The console says whether speculation pays ("against no speculation: ...") and then how sure the
    answer is among the trees ("confidence: ..."); the report said them the other way round, so that on the
    real pair its first line compared s4k1d5 with s6k8d16 and the question the user came with, whether to
    speculate at all, came second."""
    from orchestrator.report.sections import best_section

    def verdict(statement: str) -> Verdict:
        return Verdict(
            call=Call.TOO_CLOSE,
            statement=statement,
            noise_source=NoiseSource.POOLED,
            regime=Regime.OVERHEAD_BOUND,
            launch_sd=0.084,
        )

    best = report.answer.BestConfig(
        rows[0],
        "python -m sglang.launch_server",
        "",
        (),
        verdict=verdict("33.5 % ahead of the configuration of trials 2, 4"),
        versus_nospec=verdict("1.1 % ahead of the server without speculation (trial 0)"),
    )
    html_text = best_section(best)
    assert html_text.index('id="nospec"') < html_text.index('id="verdict"'), html_text[:600]


def test_a_study_not_in_this_store_names_the_studies_there_and_out(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    """Seen: `specsweep report tty1` for a study swept with `--out /tmp/walk-out` printed only "no MLflow
    experiment named 'tty1' at sqlite:///.../runs/mlflow.db", where every other error names the fix."""
    root = store.study_dir.parent
    assert report.main(["elsewhere", "--out", str(root)]) == 2
    err = capsys.readouterr().err
    assert "no MLflow experiment named 'elsewhere'" in err
    assert f"studies here: {STUDY}" in err
    assert "a study swept with --out DIR is reported with --out DIR" in err


def test_importances_rank_only_the_values_that_varied(tmp_path: Path) -> None:
    """The real pair's grid on one H100 held the memory flags at one value each (mf 0.95, graph batch and
    running requests 32) and varied the tree: its report ranked max_running_requests and
    cuda_graph_max_bs (two zero bars) among the searched values, and said the fraction was "set by the
    memory model for each tree", where the spec had fixed it."""
    import tarfile

    archive = Path(__file__).resolve().parents[1] / "fixtures/sglang/0.5.17/smollm2-grid12-h100/study.tgz"
    with tarfile.open(archive) as tar:
        tar.extract("grid/optuna.db", tmp_path, filter="data")
    storage = f"sqlite:///{tmp_path / 'grid' / 'optuna.db'}"
    result = importances_of(optuna.load_study(study_name="smollm2-grid12", storage=storage).get_trials())
    ranked = dict(result.values)
    assert set(ranked) == {"speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens"}
    assert sum(ranked.values()) == pytest.approx(1.0)
    assert "set by the memory model" not in result.note
    held = result.note[result.note.index("Held at one value") :]
    for name, value in (
        ("mem_fraction_static", "0.95"),
        ("max_running_requests", "32"),
        ("cuda_graph_max_bs", "32"),
    ):
        assert f"{LABELS.get(name, name)} {value}" in held, result.note
