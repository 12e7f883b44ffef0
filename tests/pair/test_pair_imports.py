"""The pair's tools stand beside the product: they import its client and log parser, never the other way."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_the_package_never_imports_the_pair_tools() -> None:
    offenders = [
        str(p.relative_to(REPO))
        for p in (REPO / "orchestrator").rglob("*.py")
        if any(n == "tools" or n.startswith("tools.") for n in _imports(p))
    ]
    assert offenders == []


def test_the_pair_tools_use_the_products_client_and_server_process_through_the_engine_seam() -> None:
    used = set().union(*(_imports(p) for p in (REPO / "tools" / "pair").glob("*.py")))
    assert {"orchestrator.bench.client", "orchestrator.engines.process", "orchestrator.engines"} <= used
    assert not [n for n in used if n.startswith("orchestrator.engines.sglang")]
