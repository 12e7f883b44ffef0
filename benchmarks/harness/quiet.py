"""Logging kept quiet for the benchmarks that run thousands of in-process trials."""

from __future__ import annotations

import logging
import warnings

import optuna


def quiet_optuna() -> None:
    """Optuna logs every trial at INFO and warns about its experimental options; the benchmark runs
    thousands of trials."""
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    logging.getLogger("orchestrator.driver").setLevel(logging.ERROR)  # the memory model logs under it too
