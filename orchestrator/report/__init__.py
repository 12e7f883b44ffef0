"""The report: one self-contained HTML page about a study, made on the driver from MLflow and Optuna.

`data` reads the trial runs back (through `mlflow_schema.read`) and shapes them, `answer` makes the
sweep's answer of them as the sweep made it, `importances` computes
fANOVA importances from the Optuna study, `plots` draws the figures, `sections` the tables and the
answer's words, and `page` writes the page; `python -m orchestrator.report STUDY` runs `page.main`.
"""

from orchestrator.report.page import (
    ReportError,
    RunReadBack,
    best_so_far,
    load_trials,
    main,
    pareto_front,
    render_html,
    write_report,
)

__all__ = [
    "ReportError",
    "RunReadBack",
    "best_so_far",
    "load_trials",
    "main",
    "pareto_front",
    "render_html",
    "write_report",
]
