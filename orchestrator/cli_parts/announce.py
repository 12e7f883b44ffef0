"""The lines a sweep starts with: the study, its nodes, what each stage sends, and where to watch it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator.bench.traffic import workload_lines
from orchestrator.driver.console.words import counted
from orchestrator.driver.store.commands import mlflow_ui_command, optuna_dashboard_lines, tool_command
from orchestrator.spec.sweep_spec import SweepSpec

if TYPE_CHECKING:
    import optuna

    from orchestrator.driver.dispatch.cluster import ClusterInfo
    from orchestrator.driver.store.study_lock import DriverStamp
    from orchestrator.driver.store.tracking import Tracker


def announce(
    spec: SweepSpec,
    info: ClusterInfo,
    study: optuna.Study,
    tracker: Tracker,
    before: DriverStamp | None,
    study_name: str,
    n_trials: int,
    tracking_uri: str,
    storage: str,
) -> None:
    """Print the start of a sweep; the MLflow runs a dead driver (`before`) left open are closed here,
    each with its line."""
    from orchestrator.driver.dispatch import cluster

    print(
        f"specsweep: study '{study_name}', {counted(n_trials, 'trial')}, backend {spec.backend.value}, "
        f"{info.slots} node(s) with a trial slot"
    )
    for run_id in tracker.close_abandoned(study, before):
        print(f"  MLflow run {run_id} of an earlier driver that died without closing it: ended KILLED")
    for line in workload_lines(spec):  # read when the spec was checked: what each stage sends
        print(f"  {line}")
    if info.dashboard_url:
        print(f"  Ray dashboard (node health, running trials): {info.dashboard_url}")
        login = cluster.dashboard_login(tool_command("ray"))
        if login:
            print(f"    {login}")
    print(f"  MLflow UI (compare trials): {mlflow_ui_command(tracking_uri)}")
    for line in optuna_dashboard_lines(storage):
        print(f"  {line}")
