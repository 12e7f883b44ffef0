"""The driver's journal: every settled trial's record, one JSON file per trial in the study's folder.

The Optuna study keeps what the sampler needs (params, value, a few attributes), MLflow what people
compare; neither gives back the driver's whole `TrialRecord` (the stages, the greedy outputs of the
lossless check, the tags). A resumed sweep reads the journal so its ranking, its confirmation launches
and its lossless check see every launch of the study, not only those of the current invocation.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Collection
from dataclasses import replace
from pathlib import Path

import pydantic

from orchestrator.driver.dispatch.stale_servers import LaunchedServers
from orchestrator.records import TrialRecord

log = logging.getLogger(__name__)

_ADAPTER: pydantic.TypeAdapter[TrialRecord] = pydantic.TypeAdapter(TrialRecord)


class Journal:
    """``FOLDER/NNNN.json`` per trial, each written whole (a reader never sees half a record). Without a
    folder it keeps nothing (the search benchmark runs thousands of sweeps that are never resumed)."""

    def __init__(self, folder: Path | None) -> None:
        self.folder = folder
        # The servers of the trials in flight (pid, create time, host), kept until each result is back.
        self.servers = LaunchedServers(folder / "servers" if folder is not None else None)

    def path(self, number: int) -> Path:
        if self.folder is None:
            raise ValueError("this journal keeps no files")
        return self.folder / f"{number:04d}.json"

    def write(self, record: TrialRecord) -> None:
        if self.folder is None:
            return
        # The server log is in MLflow and in the trial's folder; the journal keeps the figures only.
        slim = replace(record, result=replace(record.result, log_text=""))
        self.folder.mkdir(parents=True, exist_ok=True)
        tmp = self.path(record.number).with_suffix(".tmp")
        tmp.write_bytes(_ADAPTER.dump_json(slim, indent=1))
        os.replace(tmp, self.path(record.number))

    def read(self, numbers: Collection[int]) -> list[TrialRecord]:
        """The records of these trials, in trial order; a missing or unreadable one is left out (and
        logged): the study still has its value, only the ranking lacks it."""
        records: list[TrialRecord] = []
        if self.folder is None:
            return records
        for number in sorted(numbers):
            path = self.path(number)
            try:
                records.append(_ADAPTER.validate_json(path.read_bytes()))
            except FileNotFoundError:
                log.warning(
                    "trial %d has no journal record (%s): it is left out of the ranking", number, path
                )
            except (OSError, pydantic.ValidationError) as err:
                log.warning("trial %d's journal record is unreadable (%s): %s", number, path, err)
        return records
