"""The driver: the only process that asks Optuna, tells it, and records to MLflow.

Its rooms: `loop` (the ask/tell loop and its parts), `dispatch` (where trials run: the executor seam and
Ray), `store` (the study, its lock, the journal, --resume, MLflow), `search` (the search space),
`console` (the CLI's checks and progress line), `memory`, `answer` and `proposal`. Importing this package
loads nothing heavy; Ray is loaded by ``driver.dispatch.cluster``, the Ray executor.
"""
