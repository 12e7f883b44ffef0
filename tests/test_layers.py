"""Imports never run back up the floors ARCHITECTURE.md lists, and no import circle exists.

The floors are read from the page itself (its "## Floors" section), so the page and the code cannot drift
apart: a module on no floor, an import from a higher floor, a circle, or a driver module that reaches into
`node/` past `cluster.py` fails here. Every import counts: inside functions and under TYPE_CHECKING too.
`benchmarks/` stands on the top floor, above the package, and reaches an engine only through the registry,
never an engine's own package. Inside `driver/` and inside `benchmarks/`, the rooms stand on floors of their
own (the page's lists, lowest first): a room imports only from the rooms on the floors below its own, never
from one beside it or above it. Ray is imported only where the page says.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "orchestrator"
BENCHMARKS = ROOT / "benchmarks"
PAGE = ROOT / "ARCHITECTURE.md"
FLOOR_LINE = re.compile(r"^(\d+)\. \*\*[^*]+\*\*:")
ROOMS_LINE = "**The driver's floors, lowest first**:"
BENCH_ROOMS_LINE = "**The benchmarks' floors, lowest first**:"
ROOM_FLOOR_LINE = re.compile(r"^- Floor (\d+): (.+)$")
# The benchmarks' entry (`python -m benchmarks.run`): above every room, in none.
BENCH_ENTRY = "benchmarks.run"
# The one driver module that may import the node: it runs `node.trial.run_trial` as a Ray task.
NODE_SEAM = "driver.dispatch.cluster"
# What the simulated server may use above the spec (ARCHITECTURE: "sim/ uses nothing above the spec but").
SIM_ALLOWED_ABOVE_SPEC = {"engines.sglang.command"}


def module_name(path: Path) -> str:
    """`orchestrator/driver/loop/sweep.py` -> "driver.loop.sweep"; `benchmarks/run.py` -> "benchmarks.run"."""
    if path.is_relative_to(BENCHMARKS):
        return ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)  # "" is the package itself


@cache
def modules() -> dict[str, Path]:
    return {module_name(p): p for p in [*PACKAGE.rglob("*.py"), *BENCHMARKS.rglob("*.py")]}


def floors_from_page(text: str) -> dict[str, int]:
    """`records.py` -> "records", `server/` -> "server" (a folder and all below it), by floor number.

    A floor is a numbered entry, `N. **Name**: `a.py`, `b/``, going on over indented lines; what it says
    in parentheses is commentary, not members."""
    section = text[text.index("\n## Floors\n") + 1 :]
    end = section.find("\n## ")
    section = section if end < 0 else section[:end]
    entries: dict[int, str] = {}
    number = 0
    for line in section.splitlines():
        match = FLOOR_LINE.match(line)
        if match:
            number = int(match.group(1))
            entries[number] = line[match.end() :]
        elif number and line.startswith("   "):
            entries[number] += " " + line.strip()
        else:
            number = 0
    floors: dict[str, int] = {}
    for number, entry in entries.items():
        for name in re.findall(r"`([^`]+)`", re.sub(r"\([^)]*\)", "", entry)):
            if name.endswith((".py", "/")):
                floors[name.removesuffix(".py").rstrip("/").replace("/", ".")] = number
    return floors


def floor_of(module: str, floors: dict[str, int]) -> int | None:
    if module == "":
        return 1  # the package's own __init__: a docstring and the version
    parts = module.split(".")
    for i in range(len(parts), 0, -1):  # the module, else the nearest folder named on a floor
        found = floors.get(".".join(parts[:i]))
        if found is not None:
            return found
    return None


def imports_of(module: str, path: Path) -> set[str]:
    """Every module of the package this one imports, wherever the import statement stands."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)] if package else []
                source = ".".join([*base, *([node.module] if node.module else [])])
                source = f"orchestrator.{source}" if source else "orchestrator"
            else:
                source = node.module or ""
            # `from orchestrator.config import adaptive` names a module; `from orchestrator.x import Y` a
            # name in x
            # (stripped back to x below). A folder's `__init__` counts only where a name is taken from it.
            names = [f"{source}.{a.name}" for a in node.names]
        else:
            continue
        for name in names:
            if name.startswith("benchmarks."):
                inner = name
            elif name != "orchestrator" and not name.startswith("orchestrator."):
                continue
            else:
                inner = name.removeprefix("orchestrator").lstrip(".")
            while inner not in modules() and "." in inner:
                inner = inner.rpartition(".")[0]
            if inner and inner in modules() and inner != module:
                found.add(inner)
    return found


@cache
def graph() -> dict[str, set[str]]:
    return {name: imports_of(name, path) for name, path in modules().items()}


def upward(floors: dict[str, int]) -> list[str]:
    wrong = []
    for module, targets in graph().items():
        here = floor_of(module, floors)
        for target in targets:
            there = floor_of(target, floors)
            if here is not None and there is not None and there > here:
                wrong.append(f"{module} (floor {here}) -> {target} (floor {there})")
    return sorted(wrong)


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return groups


@pytest.fixture(scope="module")
def floors() -> dict[str, int]:
    return floors_from_page(PAGE.read_text())


def test_every_module_stands_on_one_floor(floors: dict[str, int]) -> None:
    assert len(set(floors.values())) >= 5
    assert [m for m in sorted(modules()) if floor_of(m, floors) is None] == []
    named_but_missing = [n for n in floors if n not in modules()]
    assert named_but_missing == []


def test_no_import_runs_back_up(floors: dict[str, int]) -> None:
    assert upward(floors) == []


def test_no_import_circle() -> None:
    assert circles(graph()) == []


def test_the_driver_reaches_the_node_only_through_the_ray_executor(floors: dict[str, int]) -> None:
    node_floor = floor_of("node", floors)
    assert node_floor is not None
    reaching = sorted(
        f"{m} -> {t}"
        for m, targets in graph().items()
        for t in targets
        if (t == "node" or t.startswith("node."))
        and not m.startswith("benchmarks")  # they run trials in process, as a node does
        and (floor_of(m, floors) or 0) > node_floor
        and m != NODE_SEAM
    )
    assert reaching == []


def test_the_simulator_uses_nothing_above_the_spec_but_the_version_parser(floors: dict[str, int]) -> None:
    spec_floor = floor_of("spec", floors)
    assert spec_floor is not None
    beyond = sorted(
        f"{m} -> {t}"
        for m, targets in graph().items()
        if m.startswith("sim.")
        for t in targets
        if not t.startswith("sim")
        and (floor_of(t, floors) or 0) > spec_floor
        and t not in SIM_ALLOWED_ABOVE_SPEC
    )
    assert beyond == []


def test_the_checker_sees_an_upward_import_and_a_circle() -> None:
    page = "\n## Floors\n\n1. **Low**: `records.py`\n2. **High**: `server/`, `bench/`\n\n## Next\n"
    floors = floors_from_page(page)
    assert floors == {"records": 1, "server": 2, "bench": 2}
    assert floor_of("server.command", floors) == 2 and floor_of("records", floors) == 1
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []
    # The real graph through the checker, with the floors turned upside down: every edge across is upward.
    flipped = {name: 3 - number for name, number in floors_from_page(PAGE.read_text()).items() if number <= 2}
    assert any("-> records" in line for line in upward(flipped))


def test_importing_the_executor_seam_loads_no_ray() -> None:
    # The driver's loop runs on an in-process executor in tests and the search benchmark: no Ray needed.
    code = (
        "import sys, orchestrator.driver.dispatch.executor, orchestrator.trial_events, orchestrator.bench, "
        "orchestrator.spec.sweep_spec; print(sorted(m for m in ('ray', 'aiohttp') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def rooms_from_page(text: str, heading: str = ROOMS_LINE, folder: str = "driver/") -> dict[str, int]:
    """A folder's rooms by floor, as the list under the page's line `heading` draws them: one line a floor,
    `- Floor N: `driver/x/`, `driver/y/``, lowest first. A room named twice fails here."""
    lines = text.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith(heading)) + 1
    while start < len(lines) and not lines[start].strip():
        start += 1
    rooms: dict[str, int] = {}
    for line in lines[start:]:
        match = ROOM_FLOOR_LINE.match(line)
        if match is None:
            break
        for name in re.findall(r"`([^`]+)`", match.group(2)):
            room = name.removeprefix(folder).rstrip("/")
            if room in rooms:
                raise ValueError(f"{name} stands on two floors")
            rooms[room] = int(match.group(1))
    return rooms


def room_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 and parts[0] == "driver" else None


def rooms_back_up(order: dict[str, int], edges: dict[str, set[str]]) -> list[str]:
    """Every import from a driver room to a room beside it or above it (or to one on no floor)."""
    wrong = []
    for module, targets in edges.items():
        here = room_of(module)
        for target in targets:
            there = room_of(target)
            if here is None or there is None or here == there:
                continue
            if here not in order or there not in order or order[there] >= order[here]:
                wrong.append(f"{module} ({here}) -> {target} ({there})")
    return sorted(wrong)


def test_every_room_of_the_driver_stands_on_one_floor() -> None:
    rooms = rooms_from_page(PAGE.read_text())
    on_disk = {p.name for p in (PACKAGE / "driver").iterdir() if (p / "__init__.py").is_file()}
    assert sorted(rooms) == sorted(on_disk)
    # Numbered from 1 without a gap: an empty floor is a drawing error, not a rule.
    assert sorted(set(rooms.values())) == list(range(1, max(rooms.values()) + 1))


def test_no_import_runs_back_up_inside_the_driver() -> None:
    assert rooms_back_up(rooms_from_page(PAGE.read_text()), graph()) == []


def test_the_room_checker_sees_an_import_back_up_and_one_beside() -> None:
    page = (
        f"\n{ROOMS_LINE}\n\n- Floor 1: `driver/store/`\n- Floor 2: `driver/search/`, `driver/answer/`\n"
        "- Floor 3: `driver/loop/`\n\n- `driver/store/` keeps what outlives the process\n"
    )
    rooms = rooms_from_page(page)
    assert rooms == {"store": 1, "search": 2, "answer": 2, "loop": 3}
    assert rooms_back_up(rooms, {"driver.loop.sweep": {"driver.store.study", "driver.answer.confirm"}}) == []
    back = {"driver.store.restore": {"driver.loop.observers"}}
    assert rooms_back_up(rooms, back) == ["driver.store.restore (store) -> driver.loop.observers (loop)"]
    beside = {"driver.search.space": {"driver.answer.noise"}}
    assert rooms_back_up(rooms, beside) == ["driver.search.space (search) -> driver.answer.noise (answer)"]
    twice = page.replace("- Floor 3: `driver/loop/`", "- Floor 3: `driver/loop/`, `driver/store/`")
    with pytest.raises(ValueError, match="two floors"):
        rooms_from_page(twice)
    # The real graph with the page's floors turned upside down: the loop's imports of the store run up.
    real = rooms_from_page(PAGE.read_text())
    upside_down = {room: -floor for room, floor in real.items()}
    assert any(
        "driver.loop.sweep (loop) -> driver.store" in line for line in rooms_back_up(upside_down, graph())
    )
    # And with every room on one floor: every import between two rooms is beside.
    flat = dict.fromkeys(real, 1)
    assert len(rooms_back_up(flat, graph())) == sum(
        1
        for module, targets in graph().items()
        for target in targets
        if room_of(module) and room_of(target) and room_of(module) != room_of(target)
    )


def imports_ray(source: str) -> bool:
    """Whether the module imports Ray anywhere: at its top, inside a function or under TYPE_CHECKING."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names = [node.module or ""]
        else:
            continue
        if any(n == "ray" or n.startswith("ray.") for n in names):
            return True
    return False


# Where Ray is imported (ARCHITECTURE, "Floors"): only in `driver/dispatch/`. The node's trial runs as a Ray
# task, but the task is dispatch's (`cluster._trial_task`): it hands the node its id and installs the
# dashboard's Ray sink, so the node and `dashboard_metrics` never name Ray.
RAY_ROOM = "driver.dispatch."


def test_ray_is_imported_only_in_dispatch() -> None:
    wrong = sorted(
        name
        for name, path in modules().items()
        # the system benchmarks start their own Ray clusters
        if not name.startswith(("benchmarks", RAY_ROOM)) and imports_ray(path.read_text())
    )
    assert wrong == []


def test_the_ray_checker_sees_ray_wherever_it_is_imported() -> None:
    assert imports_ray("import ray\n") and imports_ray("from ray.util.metrics import Gauge\n")
    assert imports_ray("def f():\n    import ray\n    return ray\n")
    assert imports_ray("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import ray.actor\n")
    assert not imports_ray("import rayon\nfrom .ray import x\nimport raylib.ray\n")


def test_the_loop_and_the_search_benchmark_load_no_ray() -> None:
    # The loop runs on an in-process executor in tests and the search benchmark; Ray's executor is
    # dispatch's, built only when no other is given, and the dashboard's Ray sink is installed only by it.
    code = (
        "import sys, orchestrator.driver.loop.sweep, orchestrator.driver.console.progress, "
        "orchestrator.node.trial, orchestrator.dashboard_metrics, benchmarks.search.oracle_sweep; "
        "print('ray' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def bench_room_of(module: str) -> str | None:
    """The room of "benchmarks.search.regret" and of "benchmarks.search" is "search"; the entry and the
    folder's own `__init__` stand in none."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "benchmarks" and module != BENCH_ENTRY else None


def bench_rooms_back_up(order: dict[str, int], edges: dict[str, set[str]]) -> list[str]:
    """Every import from a benchmarks room to a room beside it or above it, to one on no floor, or to the
    entry."""
    wrong = []
    for module, targets in edges.items():
        here = bench_room_of(module)
        if here is None:
            continue
        for target in targets:
            there = bench_room_of(target)
            if target == BENCH_ENTRY:
                wrong.append(f"{module} ({here}) -> {target} (the entry)")
            elif there is None or there == here:
                continue
            elif here not in order or there not in order or order[there] >= order[here]:
                wrong.append(f"{module} ({here}) -> {target} ({there})")
    return sorted(wrong)


def bench_rooms() -> dict[str, int]:
    return rooms_from_page(PAGE.read_text(), BENCH_ROOMS_LINE, "benchmarks/")


def test_every_benchmark_stands_in_one_room() -> None:
    rooms = bench_rooms()
    on_disk = {p.name for p in BENCHMARKS.iterdir() if (p / "__init__.py").is_file()}
    assert sorted(rooms) == sorted(on_disk) and rooms["harness"] == 1
    assert sorted(set(rooms.values())) == list(range(1, max(rooms.values()) + 1))
    # At the folder's top stand only the entry and the package's own `__init__`.
    loose = [m for m in modules() if m.startswith("benchmarks") and bench_room_of(m) is None]
    assert sorted(loose) == ["benchmarks", BENCH_ENTRY]


def test_no_import_runs_back_up_inside_the_benchmarks() -> None:
    assert bench_rooms_back_up(bench_rooms(), graph()) == []


def test_the_system_benchmarks_import_only_the_harness() -> None:
    # They measure the product's own processes, not the search: no case, oracle or strategy of the search.
    reaching = sorted(
        f"{m} -> {t}"
        for m, targets in graph().items()
        if bench_room_of(m) == "system"
        for t in targets
        if bench_room_of(t) not in (None, "system", "harness")
    )
    assert reaching == []


def test_the_bench_room_checker_sees_an_import_back_up() -> None:
    rooms = {"harness": 1, "truth": 2, "system": 2, "search": 3}
    assert bench_rooms_back_up(rooms, {"benchmarks.search.regret": {"benchmarks.harness.table"}}) == []
    beside = {"benchmarks.system.giveup": {"benchmarks.truth.cases"}}
    assert bench_rooms_back_up(rooms, beside) == [
        "benchmarks.system.giveup (system) -> benchmarks.truth.cases (truth)"
    ]
    back = {"benchmarks.truth.oracle": {"benchmarks.search.regret"}}
    assert bench_rooms_back_up(rooms, back) == [
        "benchmarks.truth.oracle (truth) -> benchmarks.search.regret (search)"
    ]
    entry = {"benchmarks.harness.table": {BENCH_ENTRY}}
    assert bench_rooms_back_up(rooms, entry) == [
        "benchmarks.harness.table (harness) -> benchmarks.run (the entry)"
    ]
    # The real graph with the page's order turned upside down: the search imports the truth below it.
    upside_down = {room: -floor for room, floor in bench_rooms().items()}
    assert any("(search) -> benchmarks.truth" in line for line in bench_rooms_back_up(upside_down, graph()))


def test_nothing_in_the_package_imports_the_benchmarks() -> None:
    reaching = sorted(
        f"{m} -> {t}"
        for m, targets in graph().items()
        if not m.startswith("benchmarks")
        for t in targets
        if t.startswith("benchmarks")
    )
    assert reaching == []


def engine_packages() -> list[str]:
    """The engines' own packages (`engines/sglang/`): what only the registry and the engine itself import."""
    return sorted(p.name for p in (PACKAGE / "engines").iterdir() if (p / "__init__.py").is_file())


def engine_internals(edges: dict[str, set[str]], engines: list[str]) -> list[str]:
    """Every import by a benchmark of a module inside an engine's own package."""
    inside = tuple(f"engines.{name}" for name in engines)
    return sorted(
        f"{m} -> {t}"
        for m, targets in edges.items()
        if m.startswith("benchmarks")
        for t in targets
        if t in inside or t.startswith(tuple(f"{p}." for p in inside))
    )


def test_no_benchmark_imports_an_engines_internals() -> None:
    # A benchmark reaches an engine as the node does, through `engines.engine_for` and the `Engine`
    # protocol: a benchmark written against SGLang's modules would not measure another engine.
    engines = engine_packages()
    assert "sglang" in engines
    assert engine_internals(graph(), engines) == []


def test_the_engine_checker_sees_a_benchmark_import_an_engines_module() -> None:
    edges = {
        "benchmarks.truth.oracle": {"engines.sglang.command", "engines.engine"},
        "benchmarks.system.giveup": {"engines", "engines.logrecords"},
        "driver.loop.sweep": {"engines.sglang.command"},  # the package's own imports are the floors' test's
    }
    assert engine_internals(edges, ["sglang"]) == ["benchmarks.truth.oracle -> engines.sglang.command"]
    # And on the real graph: each module of SGLang's package, imported by a benchmark, is seen.
    sglang = sorted(m for m in modules() if m.startswith("engines.sglang."))
    assert sglang and engine_internals({"benchmarks.x": set(sglang)}, ["sglang"]) == [
        f"benchmarks.x -> {m}" for m in sglang
    ]
