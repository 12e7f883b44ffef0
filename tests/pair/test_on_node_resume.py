"""`tools/pair/on-node.sh resume`: a later node's continuation of the pair's sweep in one call.

Continuing on a fresh node took five stages chained by hand in one command line (`draft-in`, `prepare`
or the converter, `sweep-in`, `link`, `sweep ... --resume`, `sweep-wait`); a missing piece showed only
after the target's conversion had spent the call's device time. `resume` runs them in order, skips what
is already there, and names every lacking piece before it runs anything.
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _checkout(tmp_path: Path) -> Path:
    """The script in a checkout of its own: `link` writes under trials/, never the repository's."""
    repo = tmp_path / "repo"
    (repo / "tools" / "pair").mkdir(parents=True)
    shutil.copy(ROOT / "tools" / "pair" / "on-node.sh", repo / "tools" / "pair" / "on-node.sh")
    (repo / "trials" / "models").mkdir(parents=True)
    (repo / "trials" / "datasets").mkdir()
    (repo / ".pair").mkdir()
    return repo


def _tar(members: dict[str, bytes], gz: bool) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz" if gz else "w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def _resume(repo: Path, pair: Path, study: Path) -> subprocess.CompletedProcess[str]:
    # `-S`: an interpreter without the product's dependencies, so the sweep itself refuses to start (its
    # own check, `test_on_node_sweep`) and nothing runs in the background.
    return subprocess.run(
        ["bash", "tools/pair/on-node.sh", "resume", "trials/smollm2-h200.yaml", str(study), "700", "5"],
        cwd=repo,
        env={"PATH": os.environ["PATH"], "PYTHON": f"{sys.executable} -S", "PAIR": str(pair)},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_every_lacking_piece_is_named_before_anything_runs(tmp_path: Path) -> None:
    repo, pair, study = _checkout(tmp_path), tmp_path / "pair", tmp_path / "prod" / "smollm2-h200"
    run = _resume(repo, pair, study)
    assert run.returncode == 2, run.stderr
    for piece in (".pair/draft.tar.NN", "smollm2.whl.sha256", ".pair/sweep-out.tgz.NN"):
        assert piece in run.stderr, (piece, run.stderr)
    assert not (pair / "draft").exists() and not study.exists()
    assert not list((repo / "trials" / "models").iterdir())  # not linked


def test_the_draft_and_the_study_go_in_and_the_pair_is_linked_before_the_sweep(tmp_path: Path) -> None:
    repo, pair, study = _checkout(tmp_path), tmp_path / "pair", tmp_path / "prod" / "smollm2-h200"
    (pair / "target").mkdir(parents=True)
    (pair / "target" / "conversion_check.json").write_text("{}")  # converted by an earlier call
    draft = _tar({"draft/model.safetensors": b"weights", "draft/config.json": b"{}"}, gz=False)
    (repo / ".pair" / "draft.tar.00").write_bytes(draft[:4096])
    (repo / ".pair" / "draft.tar.01").write_bytes(draft[4096:])
    records = _tar({"smollm2-h200/records/0000.json": b'{"number": 0}'}, gz=True)
    (repo / ".pair" / "sweep-out.tgz.00").write_bytes(records)

    run = _resume(repo, pair, study)

    assert (pair / "draft" / "model.safetensors").read_bytes() == b"weights"
    assert (study / "records" / "0000.json").read_text() == '{"number": 0}'
    models = repo / "trials" / "models"
    assert (models / "smollm2-135m").resolve() == (pair / "target").resolve()
    assert (models / "smollm2-135m-eagle3").resolve() == (pair / "draft").resolve()
    # then the sweep, which refuses here (no product bundle): the stage's exit status, nothing started
    assert run.returncode == 2 and "ssweep-unpack.sh" in run.stderr, run.stderr
    assert not Path(f"{study}.console").exists()


def test_the_wheels_checksum_kept_by_an_earlier_piece_call_is_enough(tmp_path: Path) -> None:
    # The last piece's call carried .pair/smollm2.whl.sha256; the resume call carries the draft and the
    # study instead, so `piece` kept the checksum beside the pieces.
    repo, pair, study = _checkout(tmp_path), tmp_path / "pair", tmp_path / "prod" / "smollm2-h200"
    (repo / ".pair" / "smollm2.whl.00").write_bytes(b"wheel")
    (repo / ".pair" / "smollm2.whl.sha256").write_text("0" * 64 + "\n")
    env = {"PATH": os.environ["PATH"], "PAIR": str(pair)}
    subprocess.run(
        ["bash", "tools/pair/on-node.sh", "piece"], cwd=repo, env=env, check=True, capture_output=True
    )
    (repo / ".pair" / "smollm2.whl.sha256").unlink()
    run = _resume(repo, pair, study)
    assert run.returncode == 2
    assert "smollm2.whl.sha256" not in run.stderr and ".pair/draft.tar.NN" in run.stderr, run.stderr


def test_a_sweep_still_running_here_is_followed_not_started_again(tmp_path: Path) -> None:
    repo, pair, study = _checkout(tmp_path), tmp_path / "pair", tmp_path / "prod" / "smollm2-h200"
    study.mkdir(parents=True)
    Path(f"{study}.console").write_text("  trial   5 benchmarking stage 2 of 3\n")  # and no .rc: running
    run = _resume(repo, pair, study)
    assert run.returncode == 0, run.stderr
    assert "still running on this node: following it" in run.stdout
    assert "trial   5 benchmarking stage 2 of 3" in run.stdout and "sweep still running" in run.stdout
    assert not list((repo / "trials" / "models").iterdir())  # nothing else done


def test_the_study_goes_in_under_the_folder_named_whatever_it_was_called_before(tmp_path: Path) -> None:
    # `sweep-wait` tars the study folder under its own name; `sweep-in /tmp/prod/smollm2-h200` of a folder
    # once called /tmp/prod unpacked it to /tmp/prod/prod, `ls` failed, and the call's device time was gone.
    repo, pair, study = _checkout(tmp_path), tmp_path / "pair", tmp_path / "elsewhere" / "mine"
    (pair / "target").mkdir(parents=True)
    (pair / "target" / "conversion_check.json").write_text("{}")
    (pair / "draft").mkdir()
    (pair / "draft" / "model.safetensors").write_bytes(b"weights")
    tgz = _tar({"prod/optuna.db": b"db", "prod/smollm2-h200/records/0000.json": b"{}"}, gz=True)
    (repo / ".pair" / "sweep-out.tgz.00").write_bytes(tgz)
    run = _resume(repo, pair, study)
    assert (study / "optuna.db").read_bytes() == b"db", run.stderr
    assert (study / "smollm2-h200" / "records" / "0000.json").exists()
    assert "ssweep-unpack.sh" in run.stderr  # on to the sweep


RECORDING_PYTHON = """#!/usr/bin/env bash
echo "$*" >> "$CALLS"
case "$1 $2" in
  "-c "*) exit 1 ;;  # the product's dependencies do not import here: the sweep refuses to start
  "-m tools.pair.convert_gguf") mkdir -p "$4" && echo '{}' > "$4/conversion_check.json" ;;
  "-m tools.pair.train_draft") out=$(echo "$*" | sed 's/.*--out \\([^ ]*\\).*/\\1/')
    mkdir -p "$out" && echo weights > "$out/model.safetensors" && echo '{}' > "$out/train_summary.json" ;;
  "-m tools.pair.eval_draft") echo '{}' > "${@: -1}" ;;
esac
"""


def test_without_a_draft_it_is_trained_from_the_committed_answers(tmp_path: Path) -> None:
    """Every session's node is fresh and brings nothing back of the last: a resume with no draft pieces
    trained nothing and stopped ("carry .pair/draft.tar.NN"), and answering 12,000 prompts again cost
    about 480 s of a 1,800 s lease. The target's answers are committed (tools/pair/data/smollm2-answers.tgz,
    deterministic: the same sha256 on three H100s), so the draft is trained from them, with no answering."""
    repo, pair, study = _checkout(tmp_path), tmp_path / "pair", tmp_path / "prod" / "smollm2-h200"
    answers = _tar({"data/train.jsonl": b'{"ids": [1, 2]}\n', "data/selfdistill.json": b"{}"}, gz=True)
    (repo / "tools" / "pair" / "data").mkdir()
    (repo / "tools" / "pair" / "data" / "smollm2-answers.tgz").write_bytes(answers)
    (pair / "pieces").mkdir(parents=True)
    wheel = b"the package's wheel"
    (pair / "pieces" / "smollm2.whl.00").write_bytes(wheel)
    (pair / "pieces" / "smollm2.whl.sha256").write_text(hashlib.sha256(wheel).hexdigest() + "\n")
    (repo / ".pair" / "sweep-out.tgz.00").write_bytes(_tar({"prod/optuna.db": b"db"}, gz=True))
    python = tmp_path / "python"
    python.write_text(RECORDING_PYTHON)
    python.chmod(0o755)
    calls = tmp_path / "calls"
    run = subprocess.run(
        ["bash", "tools/pair/on-node.sh", "resume", "trials/smollm2-h200.yaml", str(study), "700", "5"],
        cwd=repo,
        env={"PATH": os.environ["PATH"], "PYTHON": str(python), "PAIR": str(pair), "CALLS": str(calls)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    modules = [c.split()[1] for c in calls.read_text().splitlines() if c.startswith("-m ")]
    assert modules == ["tools.pair.convert_gguf", "tools.pair.train_draft", "tools.pair.eval_draft"], (
        modules,
        run.stderr,
    )
    assert (pair / "data" / "train.jsonl").read_bytes() == b'{"ids": [1, 2]}\n'
    assert (pair / "draft" / "model.safetensors").exists()
    assert (study / "optuna.db").read_bytes() == b"db"
    assert run.returncode == 2 and "ssweep-unpack.sh" in run.stderr, run.stderr  # on to the sweep


def test_a_converted_target_without_a_draft_still_trains(tmp_path: Path) -> None:
    # An earlier call converted the target (conversion_check.json is there) and was cut before training:
    # `resume` called `prepare` only when the target lacked, and went on to sweep with no draft.
    repo, pair, study = _checkout(tmp_path), tmp_path / "pair", tmp_path / "prod" / "smollm2-h200"
    answers = _tar({"data/train.jsonl": b"{}\n", "data/selfdistill.json": b"{}"}, gz=True)
    (repo / "tools" / "pair" / "data").mkdir()
    (repo / "tools" / "pair" / "data" / "smollm2-answers.tgz").write_bytes(answers)
    (pair / "target").mkdir(parents=True)
    (pair / "target" / "conversion_check.json").write_text("{}")
    (pair / "pieces").mkdir()
    wheel = b"wheel"
    (pair / "pieces" / "smollm2.whl.00").write_bytes(wheel)
    (pair / "pieces" / "smollm2.whl.sha256").write_text(hashlib.sha256(wheel).hexdigest() + "\n")
    study.mkdir(parents=True)
    python = tmp_path / "python"
    python.write_text(RECORDING_PYTHON)
    python.chmod(0o755)
    calls = tmp_path / "calls"
    subprocess.run(
        ["bash", "tools/pair/on-node.sh", "resume", "trials/smollm2-h200.yaml", str(study), "700", "5"],
        cwd=repo,
        env={"PATH": os.environ["PATH"], "PYTHON": str(python), "PAIR": str(pair), "CALLS": str(calls)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (pair / "draft" / "model.safetensors").exists()
    assert "tools.pair.train_draft" in calls.read_text()
