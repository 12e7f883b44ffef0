"""`specsweep fit ...` and `specsweep report ...` beside `specsweep [SPEC]`: the same commands as their
`python -m` paths (four modules deep for the memory command), under the one installed name."""

from __future__ import annotations

from collections.abc import Callable


def fit(argv: list[str], prog: str = "specsweep fit") -> int:
    from orchestrator.driver.memory.fit import main as fit_main

    return fit_main(argv, prog=prog)


def report(argv: list[str], prog: str = "specsweep report") -> int:
    from orchestrator.report.page import main as report_main

    return report_main(argv, prog=prog)


# Each takes its arguments and its name as the user typed the command (`specsweep fit`, or
# `python -m orchestrator.sweep fit`): what its --help and usage errors print.
COMMANDS: dict[str, Callable[[list[str], str], int]] = {"fit": fit, "report": report}
