"""ARCHITECTURE.md names real code: every file, folder, module, function and method it quotes exists.

The page is how a newcomer finds their way; a name that was renamed or moved away fails here rather than
sending the reader looking for it. The section on work in progress is skipped.
"""

from __future__ import annotations

import ast
import importlib
import re
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "ARCHITECTURE.md"
IN_PROGRESS = "## The driver package (in progress)"
DOTTED = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+$")
FILE_SUFFIXES = (".py", ".md", ".json", ".sh", ".yaml")


def quoted() -> list[str]:
    text = PAGE.read_text()
    if IN_PROGRESS in text:  # a section on work not landed yet may name what does not exist
        start = text.index(IN_PROGRESS)
        end = text.index("\n## ", start + 1)
        text = text[:start] + text[end:]
    return re.findall(r"`([^`]+)`", text)


@cache
def definitions(path: Path) -> dict[str, set[str]]:
    """Top-level names of a module ("") and, for each class, the names defined in its body; a class's bases,
    by name, under "<bases of NAME>"."""
    tree = ast.parse(path.read_text())
    names: dict[str, set[str]] = {"": set()}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names[""].add(node.name)
        if isinstance(node, ast.ClassDef):
            names[f"<bases of {node.name}>"] = {b.id for b in node.bases if isinstance(b, ast.Name)}
            members = set()
            for item in node.body:
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                    members.add(item.name)
                elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    members.add(item.target.id)
            names[node.name] = members
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names[""] |= {t.id for t in targets if isinstance(t, ast.Name)}
    return names


def module_file(parts: list[str]) -> Path | None:
    base = ROOT.joinpath("orchestrator", *parts)
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def resolves(name: str) -> bool:
    parts = name.split(".")
    if parts[0] in ("optuna", "ray"):
        obj: object = importlib.import_module(parts[0])
        for part in parts[1:]:
            obj = getattr(obj, part)
        return True
    if parts[0] == "orchestrator":
        parts = parts[1:]
    for i in range(len(parts), 0, -1):  # the longest module prefix, then the names inside it
        path = module_file(parts[:i])
        if path is None:
            continue
        rest, defs = parts[i:], definitions(path)
        if not rest:
            return True
        if rest[0] not in defs[""]:
            return False
        return len(rest) == 1 or (len(rest) == 2 and rest[1] in defs.get(rest[0], set()))
    # `Class.member`: a class of the package that has that member, itself or through a base it names
    # (`Sweep.prepare`: `Sweep` is made of parts in modules of their own).
    if len(parts) == 2 and parts[0][:1].isupper():
        return has_member(parts[0], parts[1])
    return False


def has_member(cls: str, member: str, seen: frozenset[str] = frozenset()) -> bool:
    files = list((ROOT / "orchestrator").rglob("*.py"))
    if any(member in definitions(p).get(cls, set()) for p in files):
        return True
    bases = set().union(*(definitions(p).get(f"<bases of {cls}>", set()) for p in files)) - seen - {cls}
    return any(has_member(base, member, seen | {cls}) for base in sorted(bases))


def test_every_quoted_path_exists() -> None:
    paths = [t for t in quoted() if ("/" in t or t.endswith(".py")) and " " not in t]
    assert len(paths) > 20
    missing = [
        t for t in paths if not any(list(base.glob(t.rstrip("/"))) for base in (ROOT, ROOT / "orchestrator"))
    ]
    assert missing == []


def test_every_quoted_module_function_and_method_exists() -> None:
    names = [t for t in quoted() if DOTTED.match(t) and not t.endswith(FILE_SUFFIXES)]
    commands = [t.split()[2] for t in quoted() if t.startswith("python -m orchestrator.")]
    assert len(names) > 30 and commands
    assert [n for n in names if not resolves(n)] == []
    assert [c for c in commands if module_file(c.split(".")[1:]) is None] == []


def test_the_checker_rejects_what_does_not_exist() -> None:
    assert resolves("node.trial.run_trial") and resolves("Sweep.prepare")
    assert not resolves("node.trial.run_trials")
    assert not resolves("TrialRun.no_such_method") and not resolves("Sweep.no_such_method")
    assert not resolves("server.logparse.LogParser.no_such_method")
