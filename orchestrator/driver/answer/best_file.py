"""`best.json`: the sweep's answer as a file, written and read through one typed model.

It holds the answer of `driver.answer.choose` (the configuration, its median over its launches and which
launches those are, the verdict) and what a user needs to run it: the SGLang command of the launch whose
figure is the median, its memory account and the best setting per concurrency level. The CLI, the study
guard and the report read it back through `BestFile.read`, never by key.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from orchestrator.config.codec import config_from_mlflow, engine_value_name, mlflow_params
from orchestrator.config.draft_tree import DraftTree
from orchestrator.config.fields import SearchedField
from orchestrator.driver.answer.choose import Verdict
from orchestrator.driver.answer.levels import LevelComparison, Split
from orchestrator.records import ServerConfig

log = logging.getLogger(__name__)

BEST_JSON = "best.json"
BEST_COMMAND = "best_command.sh"  # the answer's SGLang command, written next to it


class Level(BaseModel):
    """The fastest setting measured at one concurrency level (`policy.best_by_concurrency`): speculative, or
    the server without speculation (steps 0)."""

    model_config = ConfigDict(frozen=True)

    concurrency: int
    trial: int  # the launch whose stage at this level measured the median
    output_tok_per_s: float  # the median of the configuration's launches at this level
    launches: int = 1  # how many launches measured it (a file written before the median: 1)
    accept_length: float | None = None
    config: str = ""
    answer_tok_per_s: float | None = None  # the answer's median here, where another configuration leads
    # Where the answer holds the level though another configuration measured higher there, within the
    # noise: that configuration, its median, launch count and the launch nearest its median.
    higher_config: str | None = None
    higher_speculative: bool = True
    higher_tok_per_s: float | None = None
    higher_launches: int | None = None
    higher_trial: int | None = None
    speculative_num_steps: int = 0
    speculative_eagle_topk: int | None = None
    speculative_num_draft_tokens: int | None = None
    speculative_adaptive: str = "off"

    def tree(self) -> DraftTree | None:
        """The level's draft tree; None for the server without speculation."""
        s, k, d = self.speculative_num_steps, self.speculative_eagle_topk, self.speculative_num_draft_tokens
        return DraftTree(s, k, d) if s and k is not None and d is not None else None


def gib_keys(memory: Mapping[str, float]) -> dict[str, float]:
    """A memory account's figures under names that say their unit: the log's `*_gb` (GiB, which SGLang
    prints as "GB") as `*_gib`; other names as they are."""
    return {(k.removesuffix("_gb") + "_gib" if k.endswith("_gb") else k): v for k, v in memory.items()}


class BestFile(BaseModel):
    """The answer of a sweep (`best.json`)."""

    model_config = ConfigDict(frozen=True)

    config_label: str  # ServerConfig.label(): the `config` tag of the launches' MLflow runs
    # The configuration's values under their searched names, typed for scripts (0.91, 64; the adaptive
    # mode a string), read back by the one codec (`config.codec.config_from_mlflow`): `server_config()`.
    # A file written before they were typed holds strings, and reads all the same.
    config: dict[str, int | float | str]
    launches: list[int]  # the trials that launched it and measured a figure, in order
    launch_tok_per_s: list[float]  # their figures, same order
    median_tok_per_s: float  # the answer's figure: the median of its launches
    trial: int  # the launch whose figure is the median: the command and memory account are its own
    verdict: Verdict
    speedup_vs_baseline: float | None = None  # the median over the baseline's tok/s
    accept_length: float | None = None
    # The answer's memory account per GPU: GiB under `*_gib` keys (SGLang's log prints them as "GB"),
    # token counts under `*_tokens`; a file written with the log's `*_gb` names reads the same.
    memory: dict[str, float] = {}
    resolved_args: dict[str, float | int] = {}
    server_version: str = ""
    command: list[str] = []
    dataset: str = ""
    best_by_concurrency: list[Level] = []
    runtime_policy: dict[str, Any] = {}
    # The answer is the server without speculation: it led the best speculative configuration beyond the
    # noise (`verdict` is that comparison); `command` has no speculative flag.
    nospec: bool = False
    versus_nospec: Verdict | None = None  # a speculative answer against the server without speculation
    speculation_by_level: list[LevelComparison] = []  # the best speculative configuration against it
    split: Split | None = None  # speculation pays at some levels and loses at others
    # The answer and the server without speculation never ran on one node (`answer.nodes.node_note`)
    node_note: str = ""

    @field_validator("memory", mode="before")
    @classmethod
    def _gib_keys(cls, memory: Any) -> Any:
        return gib_keys(memory) if isinstance(memory, dict) else memory

    @classmethod
    def read(cls, study_dir: Path) -> BestFile | None:
        """The study folder's best.json; None when there is none or it is not one this version reads
        (a warning names the file)."""
        path = study_dir / BEST_JSON
        try:
            text = path.read_text()
        except FileNotFoundError:
            return None
        except OSError as err:
            log.warning("could not read %s: %s", path, err)
            return None
        try:
            return cls.model_validate_json(text)
        except ValidationError as err:
            log.warning(
                "%s is not a best.json this version reads (%d error(s)); left out", path, err.error_count()
            )
            return None

    @staticmethod
    def config_fields(config: ServerConfig) -> dict[str, int | float | str]:
        """What `config` holds for a `ServerConfig`: the codec's MLflow form with each value typed."""
        typed: dict[str, int | float | str] = {}
        for name, text in mlflow_params(config).items():
            if (own := engine_value_name(name)) is not None:
                typed[name] = config.engine_value(own) or 0.0
                continue
            value = getattr(config, name) if name != SearchedField.SPECULATIVE_ADAPTIVE else None
            typed[name] = value if isinstance(value, int | float) and not isinstance(value, bool) else text
        return typed

    def server_config(self) -> ServerConfig | None:
        """The answer's configuration, read back through the codec (None for a file it cannot read)."""
        return config_from_mlflow({k: str(v) for k, v in self.config.items()})

    def headline(self) -> str:
        """The answer in one line: which launches, the median, the speed-up, the configuration."""
        n = len(self.launches)
        speedup = f", {self.speedup_vs_baseline:.2f}x the baseline" if self.speedup_vs_baseline else ""
        what = "best: serve without speculation: " if self.nospec else "best: "
        if n == 1:
            tok_s = f"{self.median_tok_per_s:.1f} tok/s"
            return f"{what}trial {self.launches[0]}, {tok_s}{speedup}, {self.config_label}"
        trials = ", ".join(map(str, self.launches))
        return (
            f"{what}trials {trials} (one configuration), median {self.median_tok_per_s:.1f} tok/s of {n} "
            f"launches{speedup}, {self.config_label}"
        )

    def write(self, study_dir: Path) -> Path:
        path = study_dir / BEST_JSON
        path.write_text(self.model_dump_json(indent=1))
        return path
