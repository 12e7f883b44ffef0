"""The command line's parts, each one job of `orchestrator.cli` (the entry, which imports them all):
`parser` (the flags), `subcommands` (`specsweep fit`, `specsweep report`), `stopping` (Ctrl-C and
SIGTERM, and the command that continues), `announce` (the lines a sweep starts with) and `wrap_up` (what
it prints and writes at its end).

Importing this package loads nothing: each part keeps its heavy imports inside its functions, as the
entry does, so a bad spec fails before Ray, Optuna or MLflow load.
"""
