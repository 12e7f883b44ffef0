"""`specsweep fit ...` and `specsweep report ...` beside `specsweep [SPEC]`: the same commands as their
`python -m` paths (four modules deep for the memory command), under the one installed name."""

from __future__ import annotations

from collections.abc import Callable


def fit(argv: list[str]) -> int:
    from orchestrator.driver.memory.fit import main as fit_main

    return fit_main(argv, prog="specsweep fit")


def report(argv: list[str]) -> int:
    from orchestrator.report.page import main as report_main

    return report_main(argv, prog="specsweep report")


COMMANDS: dict[str, Callable[[list[str]], int]] = {"fit": fit, "report": report}
