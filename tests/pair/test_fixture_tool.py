"""`tools/pair/fixture.py`: a sweep brought back from a node becomes a fixture without the node's paths, and
its study survives the machine in a small archive that `on-node.sh sweep-in` puts back for `--resume`.

The sweep here is built in the shape `on-node.sh sweep-wait` packs (one top folder: the stores, the
study's folder); the archive is then brought in by the real `on-node.sh sweep-in`.
"""

from __future__ import annotations

import io
import os
import sqlite3
import subprocess
import tarfile
from pathlib import Path

from tools.pair.fixture import PLOTLY_NOTE, main

ROOT = Path(__file__).resolve().parents[2]
PLOTLY = "/**\n* plotly.js v4.1.1\n* Copyright 2012-2026, Plotly, Inc.\n*/ var Plotly = {big: 1};"


def _sweep(tmp_path: Path) -> Path:
    """A node's sweep folder /tmp/prod, packed into two pieces as sweep-wait leaves them."""
    prod = tmp_path / "node" / "prod"
    study = prod / "smollm2-h200"
    (study / "records").mkdir(parents=True)
    (study / "trials" / "0000").mkdir(parents=True)
    (prod / "mlartifacts" / "smollm2-h200" / "run1" / "artifacts").mkdir(parents=True)
    with sqlite3.connect(prod / "optuna.db") as con:
        con.execute("create table studies (study_name text)")
        con.execute("insert into studies values ('smollm2-h200')")
    with sqlite3.connect(prod / "mlflow.db") as con:
        con.execute("create table params (key text, value text, step integer)")
        con.execute(
            "insert into params values ('dataset', 'sharegpt: /srv/checkout/trials/datasets/m.json', 0)"
        )
        con.execute("insert into params values ('out', '/tmp/prod/smollm2-h200', 1)")
    (prod / "mlartifacts" / "smollm2-h200" / "run1" / "artifacts" / "report.html").write_text("x" * 100)
    (study / "records" / "0000.json").write_text(
        '{"command": "/opt/torch/.venv/bin/python3 --model-path /tmp/pair/target",'
        ' "dataset": "sharegpt: /srv/checkout/trials/datasets/mt_bench.json"}'
    )
    (study / "trials" / "0000" / "command.txt").write_text(
        "/opt/torch/.venv/bin/python3 -m sglang.launch_server"
    )
    (study / "trials" / "0000" / "server.log").write_text(
        'File "/tmp/site/sglang/srt/server.py"\nFile "/tmp/ssweep-site/ray/x.py"\n'
    )
    (study / "best.json").write_text('{"report": "/tmp/prod/smollm2-h200/report.html"}')
    (study / "best_command.sh").write_text("/opt/torch/.venv/bin/python3 -m sglang.launch_server\n")
    (study / "report.html").write_text(
        f'<html><script type="text/javascript">{PLOTLY}</script>'
        "<script>window.PLOTLYENV={};</script></html>"
    )
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        tar.add(prod, arcname="prod")
    data = buf.getvalue()
    pieces = tmp_path / "pieces"
    pieces.mkdir()
    half = len(data) // 2
    (pieces / "sweep-out.tgz.00").write_bytes(data[:half])
    (pieces / "sweep-out.tgz.01").write_bytes(data[half:])
    (pieces / "sweep-console.txt").write_text(
        "to continue: /opt/torch/.venv/bin/python3 -m orchestrator.sweep --out /tmp/prod --resume\n"
        "MLflow UI: /tmp/ssweep-site/bin/mlflow ui --backend-store-uri sqlite:////tmp/prod/mlflow.db\n"
    )
    return pieces


def test_the_fixture_reads_without_the_node_paths_and_without_plotly(tmp_path: Path) -> None:
    pieces = _sweep(tmp_path)
    out = tmp_path / "fixture"
    assert main([str(out), "--pieces", str(pieces)]) == 0

    console = (out / "console.txt").read_text()
    assert "VENV/bin/python3 -m orchestrator.sweep --out runs --resume" in console
    assert "BUNDLE/bin/mlflow ui --backend-store-uri sqlite:///runs/mlflow.db" in console
    log = (out / "trials" / "0000" / "server.log").read_text()
    assert 'File "SITE/sglang/srt/server.py"' in log and 'File "BUNDLE/ray/x.py"' in log
    record = (out / "records" / "0000.json").read_text()
    assert "PAIR/target" in record and '"sharegpt: trials/datasets/mt_bench.json"' in record
    assert (out / "best.json").read_text() == '{"report": "runs/smollm2-h200/report.html"}'
    assert os.access(out / "best_command.sh", os.X_OK)
    report = (out / "report.html").read_text()
    assert "Plotly = {big" not in report and PLOTLY_NOTE in report and "window.PLOTLYENV" in report
    every = "".join(p.read_text() for p in out.rglob("*") if p.is_file())
    assert "/tmp/" not in every and "/opt/" not in every and "/srv/" not in every
    assert not (out / "study.tgz").exists()


def test_the_study_archive_comes_back_through_sweep_in_for_resume(tmp_path: Path) -> None:
    pieces = _sweep(tmp_path)
    out = tmp_path / "fixture"
    assert main([str(out), "--pieces", str(pieces), "--study-archive"]) == 0
    with tarfile.open(out / "study.tgz") as tar:
        names = tar.getnames()
    assert "prod/optuna.db" in names and "prod/smollm2-h200/records/0000.json" in names
    assert not [n for n in names if "mlartifacts" in n or n.endswith("report.html")]
    # the node's checkout is dropped in the records and in MLflow's params; the study's folder stays
    # where it ran, for --resume there
    unpacked = tmp_path / "unpacked"
    with tarfile.open(out / "study.tgz") as tar:
        tar.extractall(unpacked, filter="data")
    assert "/srv/" not in (unpacked / "prod" / "smollm2-h200" / "records" / "0000.json").read_text()
    with sqlite3.connect(unpacked / "prod" / "mlflow.db") as con:
        assert con.execute("select value from params order by step").fetchall() == [
            ("sharegpt: trials/datasets/m.json",),
            ("/tmp/prod/smollm2-h200",),
        ]

    # A later node: the archive carried as the piece sweep-in looks for, put back where the study ran.
    node = tmp_path / "later"
    (node / ".pair").mkdir(parents=True)
    (node / ".pair" / "sweep-out.tgz.00").write_bytes((out / "study.tgz").read_bytes())
    dest = tmp_path / "again" / "prod"
    env = {**os.environ, "PAIR": str(tmp_path / "pairdir")}
    run = subprocess.run(
        ["bash", str(ROOT / "tools" / "pair" / "on-node.sh"), "sweep-in", str(dest)],
        cwd=node,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    with sqlite3.connect(dest / "optuna.db") as con:
        assert con.execute("select study_name from studies").fetchall() == [("smollm2-h200",)]
    assert (dest / "smollm2-h200" / "records" / "0000.json").is_file()
