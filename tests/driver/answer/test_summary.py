"""The end of a sweep as a user reads it: the trial table, the best configuration and its command."""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import replace
from pathlib import Path

import optuna
import pytest
from optuna.distributions import FloatDistribution

from orchestrator.driver.answer.best_file import BEST_JSON, BestFile
from orchestrator.driver.answer.choose import answer_launches, choose_answer
from orchestrator.driver.answer.summary import (
    WIDTH,
    ConsoleRow,
    count_line,
    render_levels,
    render_table,
    table_rows,
    write_best,
)
from orchestrator.engines.shell import shell_script
from orchestrator.records import (
    Failure,
    FailureKind,
    FailureStage,
    MemoryAccount,
    StageMetrics,
    TrialRecord,
    TrialResult,
    TrialStatus,
)
from orchestrator.spec.search import make_config
from orchestrator.spec.sweep_spec import Backend, load_spec

DEMO = Path(__file__).resolve().parents[3] / "trials" / "demo.yaml"
NODE_PYTHON = "/opt/sglang-env/bin/python3"
SGLANG_PYTHON = "python3"  # what a simulated sweep's command names: the simulator's Python has no SGLang
LONG_OOM = (
    "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. Current value: "
    "mem_fraction_static=0.73, and the weights already take most of the memory on every GPU of the node"
)


def result(status: TrialStatus, tok_s: float | None = None, **kw: object) -> TrialResult:
    stages = ()
    if tok_s is not None:
        stages = (StageMetrics(8, 16, 16, 0, 2.0, tok_s, 8.0, 30.0, 412.5, 5.0, 23.4, 6.0, 2.25),)
    return TrialResult(
        config=kw.pop("config", make_config(0.85, 64, 32, 2, 1, 3)),  # type: ignore[arg-type]
        status=status,
        node_id="node-a",
        command=(NODE_PYTHON, "-m", "orchestrator.sim.server", "--tp-size", "8"),
        stages=stages,
        memory=MemoryAccount(kv_cache_tokens=12379562) if tok_s else MemoryAccount(),
        startup_s=68.8 if tok_s else None,
        **kw,  # type: ignore[arg-type]
    )


def records() -> list[TrialRecord]:
    oom = Failure(FailureStage.KV_ALLOCATION, FailureKind.OOM, LONG_OOM)
    return [
        # The baseline is the fastest here, and still not the recommendation.
        TrialRecord(
            0, result(TrialStatus.OK, 1200.0, config=make_config(0.88, 512, 48)), 1200.0, None, "", True
        ),
        TrialRecord(1, result(TrialStatus.OK, 1021.0), 1021.0, 1021.0 / 1200.0),
        TrialRecord(2, result(TrialStatus.OOM, failure=oom), None),
        TrialRecord(3, result(TrialStatus.PREDICTED_OOM, failure=oom), None),
        TrialRecord(4, result(TrialStatus.LOST), None),
    ]


def right_edges(header: str) -> list[int]:
    """Where each right-aligned header word ends (the numeric columns)."""
    return [m.end() for m in re.finditer(r"\S+", header)]


def test_table_columns_line_up_fit_100_columns_and_say_their_units() -> None:
    rows = table_rows([], records())
    text = render_table(rows, budget=10)
    lines = text.splitlines()
    assert all(len(line) <= WIDTH for line in lines), max(lines, key=len)
    names, units = lines[0], lines[1]
    assert "tok/s" in names and "speedup" in names and "p99 ms" in units and "tokens" in units
    # Every numeric column ends at the same place on every trial line, a `-` placeholder included.
    edges = right_edges(names)[2:-1]  # past `#` and `status`, before `configuration`
    trial_lines = [line for line in lines[3:] if re.match(r"\s*\d+ ", line)]
    assert len(trial_lines) == 5
    for line in trial_lines:
        for edge in edges:
            assert line[edge - 1] != " " and line[edge] == " ", (line, edge)
    assert "0.85" in trial_lines[1]  # speed-up over the baseline shown


def test_failed_rows_get_one_short_reason_cut_at_a_word() -> None:
    lines = render_table(table_rows([], records())).splitlines()
    oom = next(i for i, line in enumerate(lines) if re.match(r"\s*2 oom", line))
    reason = lines[oom + 1].strip()
    assert reason.startswith("kv_allocation: RuntimeError: Not enough memory.") and reason.endswith(" ...")
    words = reason.removesuffix(" ...").split()
    assert words == f"kv_allocation: {LONG_OOM}".split()[: len(words)]  # whole words only


def test_count_line_says_what_the_rows_are() -> None:
    rows = [
        ConsoleRow(0, "ok", "a", baseline=True, tok_s=1.0),
        ConsoleRow(1, "ok", "b", tok_s=2.0),
        ConsoleRow(2, "oom", "c"),
        ConsoleRow(3, "predicted_oom", "d"),
        ConsoleRow(4, "ok", "", repeat_of=1),
        ConsoleRow(5, "lost", "e"),
    ]
    line = " ".join(count_line(rows, budget=2).split())
    expected = [
        "in all, 6 trials: 3 launched (the baseline + 2 of the 2-trial budget),",
        "1 predicted OOM (not launched),",
        "1 repeated a measured configuration (answered from the record),",
        "1 lost with their node (re-queued)",
    ]
    assert line == " ".join(expected)
    # A repeat shows the configuration and figures of the trial it repeats, and says so.
    text = render_table(rows)
    assert "same configuration as trial 1" in text
    assert re.search(r"^\s*4 ok\s+2\.0 .* b$", text, re.M)
    # Under a name of its own, the repeat is a server the engine serves as the one it repeats.
    twin = render_table([rows[1], ConsoleRow(6, "ok", "b-twin", repeat_of=1)])
    assert "same server as trial 1" in twin and re.search(r"^\s*6 ok\s+2\.0 .* b-twin$", twin, re.M)


def test_rows_of_an_earlier_invocation_come_from_the_study() -> None:
    """After --resume the table lists what the first invocation ran, from the trials' attributes."""
    dist = {"mem_fraction_static": FloatDistribution(0.5, 0.95)}
    earlier = [
        optuna.trial.create_trial(
            params={"mem_fraction_static": 0.88},
            distributions=dist,
            value=900.0,
            user_attrs={"status": "ok", "config": "mf0.880 gbs512 mrr48 s3k1d4", "output_tok_per_s": 900.0},
        ),
        optuna.trial.create_trial(
            params={"mem_fraction_static": 0.7},
            distributions=dist,
            state=optuna.trial.TrialState.PRUNED,
            user_attrs={
                "status": "oom",
                "config": "mf0.700 gbs64 mrr16 s1k1d2",
                "failure": "kv_allocation/oom: no KV cache",
            },
        ),
        # a warm-start seed from another study is not a trial of this one
        optuna.trial.create_trial(
            params={"mem_fraction_static": 0.9},
            distributions=dist,
            value=1.0,
            user_attrs={"status": "ok", "warm_start_from": "old"},
        ),
    ]
    for number, trial in enumerate(earlier):
        trial.number = number
    now = TrialRecord(3, result(TrialStatus.OK, 1000.0), 1000.0)
    rows = table_rows(earlier, [now])
    assert [(r.number, r.status) for r in rows] == [(0, "ok"), (1, "oom"), (3, "ok")]
    assert rows[1].reason == "kv_allocation: no KV cache"
    assert "900.0" in render_table(rows)


def test_the_baseline_is_never_the_recommendation() -> None:
    recs = records()
    best = choose_answer(answer_launches(recs))
    assert best is not None and best.launches == (1,)
    assert choose_answer(answer_launches(recs[:1])) is None  # only the baseline ran: nothing to recommend


def test_best_json_reads_back_through_its_model_and_the_command_is_one_flag_per_line(tmp_path: Path) -> None:
    spec = load_spec(DEMO)
    recs = records()
    answer = choose_answer(answer_launches(recs))
    assert answer is not None
    best, written = write_best(answer, recs, spec, tmp_path)
    assert [p.name for p in written] == [BEST_JSON, "best_command.sh"]
    assert BestFile.read(tmp_path) == best
    assert best.launches == [1] and best.median_tok_per_s == 1021.0 and best.trial == 1
    # Typed values for scripts (they were the strings "0.85", "64"), read back by the product's readers
    raw = json.loads((tmp_path / BEST_JSON).read_text())["config"]
    assert raw == {
        "mem_fraction_static": 0.85,
        "cuda_graph_max_bs": 64,
        "max_running_requests": 32,
        "speculative_num_steps": 2,
        "speculative_eagle_topk": 1,
        "speculative_num_draft_tokens": 3,
        "speculative_adaptive": "off",
    }
    assert type(raw["cuda_graph_max_bs"]) is int and type(raw["mem_fraction_static"]) is float
    assert best.server_config() == recs[1].result.config
    # A best.json written before they were typed still reads, to the same configuration.
    old = json.loads((tmp_path / BEST_JSON).read_text())
    old["config"] = {k: str(v) for k, v in old["config"].items()}
    (tmp_path / BEST_JSON).write_text(json.dumps(old))
    again = BestFile.read(tmp_path)
    assert again is not None and again.server_config() == recs[1].result.config
    best.write(tmp_path)
    assert best.speedup_vs_baseline == pytest.approx(1021.0 / 1200.0)
    assert "trial 1, 1021.0 tok/s, 0.85x the baseline" in best.headline()
    sh_path = written[1]
    script = sh_path.read_text()
    lines = script.splitlines()
    # The simulated node's interpreter has no SGLang: the command names the one a user's SGLang runs in.
    assert lines[:2] == ["#!/bin/sh", f"exec {SGLANG_PYTHON} -m sglang.launch_server \\"]
    for line in lines[2:]:
        flag, *value = shlex.split(line.removesuffix(" \\"))
        assert flag.startswith("--") and len(value) <= 1, line
    assert "  --tp-size 8 \\" in lines and "  --cuda-graph-max-bs-decode 64 \\" in lines
    assert script == shell_script(best.command) and best.command[0] == SGLANG_PYTHON


def test_the_answer_of_a_real_node_runs_with_the_python_the_node_ran_sglang_with(tmp_path: Path) -> None:
    spec = load_spec(DEMO).model_copy(update={"backend": Backend.REAL})
    real = [
        replace(r, result=replace(r.result, command=(NODE_PYTHON, "-m", "sglang.launch_server")))
        for r in records()
    ]
    answer = choose_answer(answer_launches(real))
    assert answer is not None
    best, _ = write_best(answer, real, spec, tmp_path)
    assert best.command[:3] == [NODE_PYTHON, "-m", "sglang.launch_server"]


def test_a_level_the_server_without_speculation_led_says_so(tmp_path: Path) -> None:
    # The baseline (trial 0) is clearly the fastest at the one level measured (twice the answer's
    # figure, beyond the 42 % gap that noise opens between stages with no steady window), and the answer
    # is still the speculative trial 1 (no verdict against the baseline here): the level line names the
    # server without speculation, not a speculative setting of "steps 0".
    recs = records()
    recs[0] = replace(recs[0], result=result(TrialStatus.OK, 2100.0, config=make_config(0.88, 512, 48)))
    answer = choose_answer(answer_launches(recs))
    assert answer is not None
    best, _ = write_best(answer, recs, load_spec(DEMO), tmp_path)
    text = render_levels(best)
    assert "8 concurrent: no speculation, 2100.0 tok/s" in text and "trial 0" in text
    assert "steps 0" not in text and "best setting per concurrency level:" in text


def test_the_progress_line_cuts_a_reason_at_a_word() -> None:
    # Seen: `[kv_allocation: RuntimeError: Not enough memory. Please try to increase --mem-fraction-st]`.
    from orchestrator.driver.console.progress import ProgressPrinter

    out: list[str] = []
    ProgressPrinter(4, tty=False, write=out.append).record(records()[2])
    reason = out[0].split("[", 1)[1].rstrip().removesuffix("]")
    assert reason.startswith("kv_allocation: ") and reason.endswith(" ...")
    words = reason.removeprefix("kv_allocation: ").removesuffix(" ...").split()
    assert words == LONG_OOM.split()[: len(words)]  # whole words only


def test_best_json_memory_keys_name_their_unit_gib_and_old_files_still_read(tmp_path: Path) -> None:
    # Seen: best.json's memory keys ended in `_gb` and held GiB (SGLang's log says "GB" for GiB).
    spec = load_spec(DEMO)
    recs = [
        replace(
            r,
            result=replace(r.result, memory=MemoryAccount(avail_end_gb=3.5, kv_cache_tokens=9, weights_gb=1)),
        )
        for r in records()
    ]
    answer = choose_answer(answer_launches(recs))
    assert answer is not None
    write_best(answer, recs, spec, tmp_path)
    raw = json.loads((tmp_path / BEST_JSON).read_text())["memory"]
    assert raw == {"avail_end_gib": 3.5, "kv_cache_tokens": 9, "weights_gib": 1.0}
    old = json.loads((tmp_path / BEST_JSON).read_text())
    old["memory"] = {"avail_end_gb": 3.5, "kv_cache_tokens": 9, "weights_gb": 1.0}  # as written before
    (tmp_path / BEST_JSON).write_text(json.dumps(old))
    again = BestFile.read(tmp_path)
    assert again is not None and again.memory == raw


def test_an_interrupted_trial_s_reason_is_printed_whole() -> None:
    # Seen: `not counted, its ...`: the part that says what became of the trial was cut.
    why = (
        "under_load: its driver (driver 3f2a on host node-a, pid 41217) stopped while it ran, after 1 "
        "benchmark stage(s): not counted, its configuration is queued again"
    )
    rows = [ConsoleRow(2, TrialStatus.INTERRUPTED.value, "mf0.880 gbs64 mrr16 s3k1d4", reason=why)]
    table = render_table(rows)
    assert " ".join(table.split()).count(" ".join(why.split())) == 1, table
    assert all(len(line) <= 100 for line in table.splitlines()), table


def test_an_interrupted_trial_s_progress_line_keeps_its_whole_reason() -> None:
    from orchestrator.driver.console.progress import ProgressPrinter

    why = (
        "its driver (driver 3f2a on host node-a, pid 41217) stopped while it ran, before any benchmark stage "
        "ended: not counted, its configuration is queued again"
    )
    failure = Failure(FailureStage.LAUNCH, FailureKind.INTERRUPTED, why)
    lines: list[str] = []
    printer = ProgressPrinter(4, tty=False, write=lines.append)
    printer.record(TrialRecord(2, result(TrialStatus.INTERRUPTED, failure=failure), None))
    assert why in lines[0] and "..." not in lines[0], lines[0]
    oom = Failure(FailureStage.KV_ALLOCATION, FailureKind.OOM, LONG_OOM)  # a server's words: cut, marked
    printer.record(TrialRecord(3, result(TrialStatus.OOM, failure=oom), None))
    assert lines[1].rstrip().endswith("...]"), lines[1]


def test_a_baseline_predicted_to_run_out_of_memory_is_not_counted_as_launched() -> None:
    """`node.gpus: 3` for a model whose weights fill every GPU: every trial, the baseline too, was
    predicted OOM, and the count read "0 launched (the baseline + -1 of the 1-trial budget)"."""
    rows = [ConsoleRow(0, "predicted_oom", "a", baseline=True), ConsoleRow(1, "predicted_oom", "b")]
    line = " ".join(count_line(rows, budget=1).split())
    assert line.startswith("in all, 2 trials: 0 launched (0 of the 1-trial budget), 2 predicted OOM"), line
