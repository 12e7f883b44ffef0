"""The offline bundles are unpacked with their bytecode compiled once.

The GPU nodes set `PYTHONDONTWRITEBYTECODE=1`, and the bundles travel without bytecode (it would double
their size): every process of every launch compiled SGLang's tree from source again. On an H100 node,
importing SGLang's server and scheduler took 41.2 s from source and 28.4 s with the bytecode compiled, in
each of a launch's processes. The unpack scripts now compile the tree they unpack (`compileall`, which
writes bytecode whatever that variable says); Python reads it whatever that variable says.
"""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _scripts(out: Path) -> None:
    subprocess.run(
        ["bash", "tools/offline-bundle.sh", "scripts"],
        cwd=ROOT,
        env={**os.environ, "OUT_DIR": str(out)},
        check=True,
        capture_output=True,
    )


def _bundle(out: Path, name: str) -> None:
    """A bundle of one module, as the build cuts it: an xz tar in one piece, and its checksums."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w:xz") as tar:
        body = b"VALUE = 1\n"
        info = tarfile.TarInfo("probe_mod.py")
        info.size = len(body)
        tar.addfile(info, io.BytesIO(body))
    piece = out / f"{name}.tar.xz.00"
    piece.write_bytes(raw.getvalue())
    digest = hashlib.sha256(piece.read_bytes()).hexdigest()
    (out / f"{name}.sha256").write_text(f"{'0' * 64}  unpacked-tree\n{digest}  {piece.name}\n")


@pytest.mark.parametrize(
    ("script", "bundle", "site"),
    [
        ("sglang-unpack.sh", "sglang-site", "/tmp/site"),
        ("ssweep-unpack.sh", "ssweep-site", "/tmp/ssweep-site"),
    ],
)
def test_an_unpacked_bundle_has_its_bytecode_on_a_node_that_writes_none(
    tmp_path: Path, script: str, bundle: str, site: str
) -> None:
    out = tmp_path / "gpu"
    out.mkdir()
    _scripts(out)
    _bundle(out, bundle)
    # The scripts unpack under /tmp as the node needs; here, under this test's own folder.
    where = tmp_path / "site"
    text = (out / script).read_text().replace(site, str(where))
    (out / script).write_text(text)
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": ""}
    run = subprocess.run(
        ["bash", "-c", f". '{out / script}' && python3 -c 'import probe_mod'"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr
    assert list((where / "__pycache__").glob("probe_mod.*.pyc")), "the bundle's bytecode was not compiled"
