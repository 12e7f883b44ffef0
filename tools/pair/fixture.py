"""A sweep brought back from a GPU node, made a fixture: the product's own files, machine paths rewritten.

`on-node.sh sweep-wait` packs the sweep's output folder (the stores, the study's folder) into
``sweep-out.tgz.NN`` pieces and copies its console beside them. This turns that into what
``tests/fixtures/sglang/<version>/`` holds: the console, the study's ``records/``, each trial's
``command.txt`` and ``server.log``, ``best.json``, ``summary.json``, ``best_command.sh`` and the report
with plotly.js's inline copy left out (4.8 MB; ``specsweep report`` writes it whole). The node's paths read
as the fixtures have always read them: the pair's folder ``PAIR``, the sweep's ``runs``, the bundles
``SITE`` and ``BUNDLE``, the interpreter ``VENV``, and the node's checkout of this repository is dropped
(``trials/datasets/...`` reads relative to it, as a user's console shows it).

With ``--study-archive`` the stores and the study's folder also go, unrewritten and without the reports, into
one small ``study.tgz``: what ``on-node.sh sweep-in`` puts back on a later node (at the same path) for
``--resume``, so that a study survives the machine it ran on.

    python -m tools.pair.fixture OUT_DIR --pieces DIR [--study NAME] [--study-archive]
"""

from __future__ import annotations

import argparse
import io
import re
import shutil
import sqlite3
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

# The node's paths and what the fixtures write for them. Longer prefixes first: /tmp/site must not eat
# /tmp/ssweep-site.
NODE_PATHS: tuple[tuple[str, str], ...] = (
    ("/tmp/ssweep-site", "BUNDLE"),
    ("/tmp/site", "SITE"),
    ("/tmp/pair", "PAIR"),
    ("/opt/torch/.venv", "VENV"),
)
_PLOTLY = re.compile(r"(<script type=\"text/javascript\">)\s*/\*\*\s*\* plotly\.js.*?(</script>)", re.DOTALL)
PLOTLY_NOTE = "/* plotly.js, inlined by the report, left out of the fixture */"
_STUDY_FILES = ("best.json", "summary.json", "best_command.sh", "report.html")


# Where the repository sat on the node, read off a path the sweep resolved under it (the spec's dataset).
_REPO_ROOT = re.compile(r"(/[^\s\"':]+?)/trials/(?:datasets|models)/")


@dataclass(frozen=True)
class Rewrite:
    """How one node's text reads in a fixture: its sweep folder becomes ``runs``, paths under the node's
    checkout of this repository become relative to it."""

    sweep_dir: str
    repo_root: str | None = None

    def text(self, text: str) -> str:
        # The sweep's folder first, with and without a trailing slash (`--out /tmp/prod`: `--out runs`).
        text = text.replace(self.sweep_dir.rstrip("/") + "/", "runs/").replace(
            self.sweep_dir.rstrip("/"), "runs"
        )
        if self.repo_root:
            text = text.replace(self.repo_root.rstrip("/") + "/", "")
        for node, fixture in NODE_PATHS:
            text = text.replace(node, fixture)
        return text


def repo_root(study: Path) -> str | None:
    """The node's checkout, as its records name it (None when no record names a path under it)."""
    for record in sorted((study / "records").glob("*.json")):
        found = _REPO_ROOT.search(record.read_text())
        if found:
            return found.group(1)
    return None


def strip_plotly(html: str) -> str:
    """The report without its inline plotly.js (the figures' own scripts stay)."""
    return _PLOTLY.sub(lambda m: f"{m.group(1)}{PLOTLY_NOTE}{m.group(2)}", html, count=1)


def unpack_pieces(pieces: Path, into: Path) -> Path:
    """The sweep's folder out of its ``sweep-out.tgz.NN`` pieces (the tar's one top entry)."""
    parts = sorted(pieces.glob("sweep-out.tgz.[0-9][0-9]"))
    if not parts:
        raise SystemExit(f"fixture: no sweep-out.tgz.NN pieces in {pieces}")
    data = b"".join(p.read_bytes() for p in parts)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        tar.extractall(into, filter="data")
    tops = [p for p in into.iterdir() if p.is_dir()]
    if len(tops) != 1:
        raise SystemExit(f"fixture: expected one folder in the pieces, found {[p.name for p in tops]}")
    return tops[0]


def write_fixture(sweep: Path, study: str, console: Path | None, out: Path, sweep_dir: str) -> list[Path]:
    """The fixture's files under ``out`` from the unpacked sweep folder; returns what was written."""
    src = sweep / study
    if not src.is_dir():
        raise SystemExit(
            f"fixture: no study {study!r} in {sweep} (found {sorted(p.name for p in sweep.iterdir())})"
        )
    rewrite = Rewrite(sweep_dir, repo_root(src))
    written: list[Path] = []

    def put(rel: str, text: str) -> None:
        dest = out / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(text)
        written.append(dest)

    for name in _STUDY_FILES:
        if (src / name).is_file():
            text = rewrite.text((src / name).read_text())
            put(name, strip_plotly(text) if name.endswith(".html") else text)
    if (out / "best_command.sh").exists():
        (out / "best_command.sh").chmod(0o755)
    for record in sorted((src / "records").glob("*.json")):
        put(f"records/{record.name}", rewrite.text(record.read_text()))
    for trial in sorted(p for p in (src / "trials").iterdir() if p.is_dir()):
        for name in ("command.txt", "server.log"):
            if (trial / name).is_file():
                put(f"trials/{trial.name}/{name}", rewrite.text((trial / name).read_text(errors="replace")))
    if console is not None:
        put("console.txt", rewrite.text(console.read_text()))
    return written


def study_archive(sweep: Path, dest: Path, repo_root: str | None = None) -> None:
    """The stores and the study's folder without reports or MLflow artifacts, at the node's paths (a
    later node resumes the study where it ran), but for the node's checkout of this repository, which the
    records and MLflow's params name: paths under it read relative to it, as on a user's console."""

    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / sweep.name
        shutil.copytree(sweep, copy, ignore=shutil.ignore_patterns("mlartifacts", "report.html"))
        if repo_root:
            _drop_root(copy, repo_root.rstrip("/") + "/")
        with tarfile.open(dest, "w:gz") as tar:
            tar.add(copy, arcname=sweep.name)


def _drop_root(folder: Path, root: str) -> None:
    """``root`` taken out of every text file and every SQLite store's text under ``folder``."""
    for path in folder.rglob("*"):
        if not path.is_file():
            continue
        if path.suffix == ".db":
            with sqlite3.connect(path) as con:
                tables = [t for (t,) in con.execute("select name from sqlite_master where type='table'")]
                for table in tables:
                    for column in [c[1] for c in con.execute(f"pragma table_info('{table}')")]:
                        con.execute(
                            f'update "{table}" set "{column}" = replace("{column}", ?, \'\') '
                            f'where typeof("{column}") = \'text\' and instr("{column}", ?) > 0',
                            (root, root),
                        )
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        if root in text:
            path.write_text(text.replace(root, ""))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.pair.fixture", description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path, help="the fixture folder to write (replaced)")
    ap.add_argument(
        "--pieces", type=Path, required=True, help="folder with sweep-out.tgz.NN (and sweep-console.txt)"
    )
    ap.add_argument("--study", default="smollm2-h200", help="the study's name (its folder in the sweep's)")
    ap.add_argument("--sweep-dir", default="/tmp/prod", help="the sweep's --out on the node (reads `runs`)")
    ap.add_argument(
        "--study-archive", action="store_true", help="also write study.tgz, for sweep-in and --resume"
    )
    args = ap.parse_args(argv)
    console = args.pieces / "sweep-console.txt"
    with tempfile.TemporaryDirectory() as tmp:
        sweep = unpack_pieces(args.pieces, Path(tmp))
        if args.out.exists():
            shutil.rmtree(args.out)
        written = write_fixture(
            sweep, args.study, console if console.is_file() else None, args.out, args.sweep_dir
        )
        if args.study_archive:
            study_archive(sweep, args.out / "study.tgz", repo_root(sweep / args.study))
            written.append(args.out / "study.tgz")
    print(f"wrote {len(written)} files under {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
