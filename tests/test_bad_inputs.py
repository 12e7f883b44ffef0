"""What a new user tries that cannot work: every bad flag or spec field is exit 2 naming it, in seconds,
with no traceback and nothing created (no study, no --out folder, no MLflow store).

Each case runs the CLI's own `main()` in-process; a few run `python -m orchestrator.sweep` to see the exit
status and the output a shell sees.
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestrator import cli

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "trials" / "demo.yaml"
Edit = Callable[[dict[str, Any]], None]


@dataclass(frozen=True)
class Bad:
    names: str  # what the message must name (the flag or the field)
    args: tuple[str, ...] = ()
    edit: Edit | None = None  # a change to the demo spec
    text: str | None = None  # the spec file's text as is (for what YAML itself gets wrong)
    env: dict[str, str] = field(default_factory=dict)


def setter(path: str, value: Any) -> Edit:
    def edit(data: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node = data
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = value

    return edit


def deleter(path: str) -> Edit:
    def edit(data: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node = data
        for p in parents:
            node = node[p]
        del node[last]

    return edit


def sglang(extra: Edit | None = None) -> Edit:
    def edit(data: dict[str, Any]) -> None:
        data["backend"] = "sglang"
        data.pop("simulated", None)
        if extra:
            extra(data)

    return edit


EAGLE3_DRAFT = ROOT / "trials" / "models" / "tiny-llama-eagle3"  # its config.json says EAGLE-3
TEXT_WORKLOAD = {
    "dataset": f"sharegpt: {ROOT / 'trials' / 'datasets' / 'mt_bench_smollm2.sharegpt.json'}",
    "num_prompts": 8,
    "input_len": 1024,
    "output_len": 64,
    "concurrency": [1],
}
DUPLICATE_NODE = DEMO.read_text().replace("node:\n", "node:\n  gpus: 2\nnode:\n", 1)

CASES: dict[str, Bad] = {
    # flags
    "trials zero": Bad("--trials", ("--trials", "0")),
    "trials negative": Bad("--trials", ("--trials", "-3")),
    "trials not a number": Bad("--trials", ("--trials", "many")),
    "time budget negative": Bad("--time-budget", ("--time-budget", "-5")),
    "time budget zero": Bad("--time-budget", ("--time-budget", "0")),
    "time budget not a number": Bad("--time-budget", ("--time-budget", "soon")),
    "study with a slash": Bad("--study", ("--study", "a/b")),
    "study with spaces": Bad("--study", ("--study", "my study")),
    "study 300 characters": Bad("--study", ("--study", "s" * 300)),
    "study empty": Bad("--study", ("--study", "")),
    "unknown flag": Bad("--trails", ("--trails", "3")),
    "resume of no study": Bad("--resume", ("--resume",)),
    "out is a file": Bad("--out", ("--out", "{tmp}/afile")),
    "out under a file": Bad("--out", ("--out", "{tmp}/afile/runs")),
    "out read-only": Bad("--out", ("--out", "/proc/specsweep-runs")),
    "storage unknown scheme": Bad("--storage", ("--storage", "bogus://x")),
    "storage not a url": Bad("--storage", ("--storage", "optuna.db")),
    "storage missing folder": Bad("--storage", ("--storage", "sqlite:///{tmp}/missing/optuna.db")),
    "storage read-only folder": Bad("--storage", ("--storage", "sqlite:////proc/optuna.db")),
    "storage is a folder": Bad("--storage", ("--storage", "sqlite:///{tmp}")),
    "storage server down": Bad("--storage", ("--storage", "postgresql://u@127.0.0.1:9/optuna")),
    "tracking unknown scheme": Bad("--tracking-uri", ("--tracking-uri", "bogus://x")),
    # A plain path or file: URI is MLflow's filesystem backend, which this MLflow refuses (a traceback
    # after the study was made, before this check): refused here, naming the sqlite:/// form.
    "tracking a plain name": Bad("--tracking-uri: 'bogus' is", ("--tracking-uri", "bogus")),
    "tracking a folder": Bad("sqlite:///", ("--tracking-uri", "{tmp}/mlruns")),
    "tracking a file uri": Bad("--tracking-uri", ("--tracking-uri", "file:///nonexist/x")),
    "tracking unwritable folder (file store allowed)": Bad(
        "--tracking-uri",
        ("--tracking-uri", "/proc/specsweep/mlruns"),
        env={"MLFLOW_ALLOW_FILE_STORE": "true"},
    ),
    "tracking under a file (file store allowed)": Bad(
        "--tracking-uri", ("--tracking-uri", "{tmp}/afile/mlruns"), env={"MLFLOW_ALLOW_FILE_STORE": "true"}
    ),
    "tracking sqlite missing folder": Bad("--tracking-uri", ("--tracking-uri", "sqlite:///{tmp}/no/m.db")),
    "tracking server down": Bad("--tracking-uri", ("--tracking-uri", "http://127.0.0.1:9")),
    "ray address down": Bad("--ray-address", ("--ray-address", "127.0.0.1:1")),
    "ray client address down": Bad("--ray-address", ("--ray-address", "ray://127.0.0.1:1")),
    "ray address no port": Bad("--ray-address", ("--ray-address", "headnode")),
    "spec missing": Bad("no such spec file", ("{tmp}/nope.yaml",)),
    "spec is a folder": Bad("a folder, not a spec file", ("{tmp}",)),
    # the spec's fields
    "spec not yaml": Bad("malformed YAML", text="name: [demo\n"),
    "spec a list": Bad("mapping", text="- name: demo\n"),
    "duplicate key": Bad("'node' appears twice", text=DUPLICATE_NODE),
    "unknown top key": Bad("budgets", edit=setter("budgets", {"trials": 3})),
    "unknown nested key": Bad("workload.prompts", edit=setter("workload.prompts", 3)),
    "name missing": Bad("name", edit=deleter("name")),
    "name with a slash": Bad("name", edit=setter("name", "a/b")),
    "backend unknown": Bad("backend", edit=setter("backend", "vllm")),
    "engine unknown": Bad(
        "engine: unknown engine 'vllm'; choose one of: sglang", edit=setter("engine", "vllm")
    ),
    "simulated section missing": Bad("simulated", edit=deleter("simulated")),
    "profile unknown": Bad("simulated.profile", edit=setter("simulated.profile", "no-such-profile")),
    "gpus zero": Bad("node.gpus", edit=setter("node.gpus", 0)),
    "gpus a word": Bad("node.gpus", edit=setter("node.gpus", "eight")),
    "gpus negative": Bad("node.gpus", edit=setter("node.gpus", -8)),
    "model path empty": Bad("model.path", edit=setter("model.path", "")),
    "model path missing (local sglang)": Bad(
        "model.path", edit=sglang(setter("model.path", "/nonexistent/m"))
    ),
    "model path missing (local, backend real)": Bad(
        "model.path",
        edit=sglang(lambda d: d.update(backend="real", **{"model": {**d["model"], "path": "/no/m"}})),
    ),
    # A text dataset reads the model's tokenizer: a model folder that is not there at all is named as
    # model.path (it is the spec's mistake), not as a folder with no tokenizer.
    "model path missing, text dataset (local sglang)": Bad(
        "model.path: /nonexistent/m does not exist",
        edit=sglang(
            lambda d: d.update(model={**d["model"], "path": "/nonexistent/m"}, workload=TEXT_WORKLOAD)
        ),
    ),
    # On a cluster the model is on the nodes, but the driver still tokenizes: its own copy is missing.
    "model path missing, text dataset (ray cluster)": Bad(
        "model.path: /nonexistent/m does not exist on this machine",
        ("--ray-address", "auto"),
        edit=sglang(
            lambda d: d.update(model={**d["model"], "path": "/nonexistent/m"}, workload=TEXT_WORKLOAD)
        ),
    ),
    "draft path missing (local sglang)": Bad(
        "model.draft_path",
        edit=sglang(lambda d: d["model"].update(path=str(ROOT), draft_path="/nonexistent/draft")),
    ),
    "eagle3 draft under EAGLE": Bad(
        "model.speculative_algorithm",
        edit=lambda d: d["model"].update(speculative_algorithm="EAGLE", draft_path=str(EAGLE3_DRAFT)),
    ),
    "algorithm unknown": Bad(
        "model.speculative_algorithm", edit=setter("model.speculative_algorithm", "MEDUSA")
    ),
    "flags a shell string": Bad("server.flags", edit=setter("server.flags", "--trust-remote-code --tp 2")),
    "flags set an owned flag": Bad("server.flags", edit=setter("server.flags", ["--tp-size", "2"])),
    "range missing high": Bad(
        "search.cuda_graph_max_bs", edit=setter("search.cuda_graph_max_bs", {"low": 64})
    ),
    "range reversed": Bad(
        "search.speculative_num_steps", edit=setter("search.speculative_num_steps", {"low": 5, "high": 1})
    ),
    "choices empty": Bad(
        "search.max_running_requests", edit=setter("search.max_running_requests", {"choices": []})
    ),
    "choices not whole": Bad(
        "search.cuda_graph_max_bs", edit=setter("search.cuda_graph_max_bs", {"choices": [64.5, 128]})
    ),
    "dim a bare number": Bad(
        "search.speculative_eagle_topk", edit=setter("search.speculative_eagle_topk", 2)
    ),
    "fraction above one": Bad(
        "search.mem_fraction_static", edit=setter("search.mem_fraction_static", {"low": 0.5, "high": 1.5})
    ),
    "searched param missing": Bad("search.max_running_requests", edit=deleter("search.max_running_requests")),
    "concurrency empty": Bad("workload.concurrency", edit=setter("workload.concurrency", [])),
    "concurrency zero": Bad("workload.concurrency", edit=setter("workload.concurrency", [0, 8])),
    "concurrency a word": Bad("workload.concurrency", edit=setter("workload.concurrency", ["many"])),
    "concurrency a number": Bad("workload.concurrency", edit=setter("workload.concurrency", 8)),
    "num prompts zero": Bad("workload.num_prompts", edit=setter("workload.num_prompts", 0)),
    "output len negative": Bad("workload.output_len", edit=setter("workload.output_len", -1)),
    "dataset unknown": Bad("workload.dataset", edit=setter("workload.dataset", "imagenet")),
    "budget trials zero": Bad("budget.trials", edit=setter("budget.trials", 0)),
    "budget trials a word": Bad("budget.trials", edit=setter("budget.trials", "twelve")),
    "confirm repeats zero": Bad("budget.confirm_repeats", edit=setter("budget.confirm_repeats", 0)),
    "timeout negative": Bad("timeouts.startup_s", edit=setter("timeouts.startup_s", -1)),
    "sla zero": Bad("objective.itl_p99_ms_max", edit=setter("objective.itl_p99_ms_max", 0)),
    "metric unknown": Bad("objective.metric", edit=setter("objective.metric", "latency")),
    "known good off the grid": Bad(
        "known_good", edit=lambda d: d["known_good"][0].update(cuda_graph_max_bs=100)
    ),
}


def _fill(value: str, tmp: Path) -> str:
    return value.replace("{tmp}", str(tmp))


def _spec_file(case: Bad, tmp: Path) -> Path:
    if case.text is None and case.edit is None:
        return DEMO
    path = tmp / "spec.yaml"
    if case.text is not None:
        path.write_text(case.text)
    else:
        data = yaml.safe_load(DEMO.read_text())
        data = copy.deepcopy(data)
        assert case.edit is not None
        case.edit(data)
        path.write_text(yaml.safe_dump(data))
    return path


def _argv(case: Bad, tmp: Path) -> list[str]:
    args = [_fill(a, tmp) for a in case.args]
    spec = [] if args and not args[0].startswith("-") else [str(_spec_file(case, tmp))]
    out = [] if "--out" in args else ["--out", str(tmp / "runs")]
    return [*spec, *args, *out, "--no-dashboard"]


def _created(tmp: Path, before: set[Path]) -> list[Path]:
    return sorted(set(tmp.rglob("*")) - before)


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "afile").write_text("not a folder")
    monkeypatch.chdir(tmp_path)  # a relative path a case might create lands here, where it is seen
    return tmp_path


def test_there_are_many_cases() -> None:
    assert len(CASES) >= 60


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input_is_exit_2_naming_it(
    name: str, workdir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    case = CASES[name]
    for key, value in case.env.items():
        monkeypatch.setenv(key, value)
    argv = _argv(case, workdir)
    before = set(workdir.rglob("*"))
    started = time.monotonic()
    try:
        rc = cli.main(argv)
    except SystemExit as exit_:  # argparse's own refusals
        rc = int(exit_.code or 0)
    elapsed = time.monotonic() - started
    captured = capsys.readouterr()
    err = captured.err
    assert rc == 2, f"exit {rc}; stdout: {captured.out[-2000:]}; stderr: {err[-2000:]}"
    assert case.names in err, err
    assert "Traceback" not in err + captured.out
    assert "function-after" not in err and "Input should be" not in err  # pydantic's words, not ours
    assert elapsed < 15, f"took {elapsed:.1f} s"
    assert _created(workdir, before) == []


@pytest.mark.parametrize(
    "args",
    [
        ["--storage", "sqlite:///{tmp}/missing/optuna.db"],
        ["--tracking-uri", "http://127.0.0.1:9"],
        ["--tracking-uri", "bogus"],
        ["--ray-address", "127.0.0.1:1"],
        ["--out", "{tmp}/afile"],
    ],
)
@pytest.mark.slow  # one CLI process per case, a few seconds each
def test_from_a_shell_exit_2_and_one_line(args: list[str], workdir: Path) -> None:
    before = set(workdir.rglob("*"))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "orchestrator.sweep", *[_fill(a, workdir) for a in args], "--no-dashboard"],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert proc.stderr.startswith(f"error: {args[0]}: ") and proc.stderr.count("\n") == 1, proc.stderr
    assert time.monotonic() - started < 30
    assert _created(workdir, before) == []
