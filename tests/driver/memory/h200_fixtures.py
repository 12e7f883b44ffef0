"""What the tests of a real H200 sweep's fixtures read: a study folder's records, as `--resume` reads them,
and the memory model the sweep of a spec starts from (the prior, before any launch)."""

from __future__ import annotations

from pathlib import Path

from orchestrator.driver.loop.node_memory import memory_model_for
from orchestrator.driver.memory.prior_model import PriorMemoryModel
from orchestrator.driver.store.journal import Journal
from orchestrator.records import TrialRecord
from orchestrator.spec.sweep_spec import load_spec


def study_records(folder: Path) -> list[TrialRecord]:
    """Every record of a study folder, read as `--resume` reads them (the driver's journal)."""
    return Journal(folder / "records").read(int(p.stem) for p in (folder / "records").glob("*.json"))


def prior_model(spec: Path) -> PriorMemoryModel:
    model, _ = memory_model_for(load_spec(spec), None)
    assert isinstance(model, PriorMemoryModel) and model.facts is not None
    return model
