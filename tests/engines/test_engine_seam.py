"""SGLang stays behind the engine seam: no module of the package imports `engines/sglang/` but SGLang's own
modules, the registration (the registry `engines/__init__.py` and the catalog `spec/engine_catalog.py`) and
the simulated SGLang node (`sim/`). Everything else reaches SGLang through `engines.engine_for`.

Every import counts, inside functions and under TYPE_CHECKING too: the imports are read from each
module's source by the same reader the floors are checked with (`tests/test_layers.py`).
"""

from __future__ import annotations

from collections.abc import Mapping

from tests.test_layers import graph

SGLANG = "engines.sglang"
# Who may import SGLang's own modules besides themselves.
REGISTRATION = {"engines", "spec.engine_catalog"}
SIMULATED_NODE = "sim"


def inside(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def leaks(edges: Mapping[str, set[str]]) -> list[str]:
    """Every import of SGLang's own modules from a module that may not make it."""
    return sorted(
        f"{module} -> {target}"
        for module, targets in edges.items()
        for target in targets
        if inside(target, SGLANG)
        and not inside(module, SGLANG)
        and module not in REGISTRATION
        and not inside(module, SIMULATED_NODE)
    )


def test_only_sglang_the_registration_and_the_simulated_node_import_sglangs_modules() -> None:
    # The package's modules: the floors' reader also reads benchmarks/, which stand outside the seam.
    edges = {m: t for m, t in graph().items() if not inside(m, "benchmarks")}
    assert any(inside(t, SGLANG) for t in edges["engines"])  # the registry does: the reader sees imports
    assert leaks(edges) == []


def test_the_neutral_core_of_engines_knows_no_engine() -> None:
    # The protocol, the launch plan, the process, the records and the API shape hold for any engine.
    neutral = {m: t for m, t in graph().items() if inside(m, "engines") and not inside(m, SGLANG)}
    assert {
        "engines.engine",
        "engines.api",
        "engines.launch",
        "engines.process",
        "engines.logrecords",
    } <= set(neutral)
    assert [
        f"{m} -> {t}"
        for m, t in sorted(neutral.items())
        if m != "engines" and any(inside(x, SGLANG) for x in t)
    ] == []


def test_the_checker_sees_a_leak_wherever_it_stands() -> None:
    edges = {
        "node.trial": {"engines.sglang.logparse"},
        "engines.launch": {"engines.sglang.command"},
        "mlflow_schema.read": {"engines.shell"},
        "engines": {"engines.sglang.engine"},
        "sim.tiers": {"engines.sglang.command"},
        "engines.sglang.engine": {"engines.sglang.wire"},
        "engines_extra": {"engines.sglang"},  # a name that only starts like the registry's
    }
    assert leaks(edges) == [
        "engines.launch -> engines.sglang.command",
        "engines_extra -> engines.sglang",
        "node.trial -> engines.sglang.logparse",
    ]
