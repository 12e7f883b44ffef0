"""The sweep spec: what to search, on what, against which workload.

A spec is YAML validated into pydantic models. Every error names the field and says how to fix it, and
all of it happens on the driver before any GPU is claimed.
"""

from __future__ import annotations

import shlex
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from orchestrator.records import ServerConfig

SEARCHED_PARAMS: tuple[str, ...] = (
    "mem_fraction_static",
    "cuda_graph_max_bs",
    "max_running_requests",
    "speculative_num_steps",
    "speculative_eagle_topk",
    "speculative_num_draft_tokens",
)

# Flags the orchestrator owns: a fixed flag may not set them, or the trial would not be what the study
# thinks it measured.
OWNED_FLAGS: frozenset[str] = frozenset(
    {
        "--model-path",
        "--model",
        "--tp-size",
        "--tensor-parallel-size",
        "--host",
        "--port",
        "--speculative-algorithm",
        "--speculative-draft-model-path",
        "--speculative-draft-model",
        "--mem-fraction-static",
        "--cuda-graph-max-bs",
        "--cuda-graph-max-bs-decode",
        "--max-running-requests",
        "--speculative-num-steps",
        "--speculative-eagle-topk",
        "--speculative-num-draft-tokens",
    }
)


class SpecError(ValueError):
    """A spec that cannot be run. The message names the field and the fix."""


class Backend(StrEnum):
    SGLANG = "sglang"
    SIMULATED = "simulated"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FloatRange(_Model):
    low: float
    high: float
    step: float | None = None
    log: bool = False

    @model_validator(mode="after")
    def _ordered(self) -> FloatRange:
        if self.low > self.high:
            raise ValueError(f"low ({self.low}) is above high ({self.high}); swap them")
        return self


class IntRange(_Model):
    low: int
    high: int
    step: int = 1
    log: bool = False

    @model_validator(mode="after")
    def _ordered(self) -> IntRange:
        if self.low > self.high:
            raise ValueError(f"low ({self.low}) is above high ({self.high}); swap them")
        if self.step < 1:
            raise ValueError("step must be at least 1")
        return self


class Choices(_Model):
    choices: list[float] = Field(min_length=1)


FloatDim = FloatRange | Choices
IntDim = IntRange | Choices


class SearchSpace(_Model):
    """Ranges (`{low, high, step}`) or `{choices: [...]}` for each searched flag.

    The three speculative values are searched together, as SGLang requires. With top-k 1 SGLang forces
    draft tokens = steps + 1, so that value is derived rather than searched; with top-k > 1 draft tokens
    is searched between steps + 1 and top-k * steps + 1 (the size of the draft tree), clipped to its range.
    """

    mem_fraction_static: FloatDim
    cuda_graph_max_bs: IntDim
    max_running_requests: IntDim
    speculative_num_steps: IntDim
    speculative_eagle_topk: IntDim
    speculative_num_draft_tokens: IntDim

    @field_validator("mem_fraction_static")
    @classmethod
    def _fraction(cls, dim: FloatDim) -> FloatDim:
        lo, hi = _dim_bounds(dim)
        if not (lo > 0.0 and hi < 1.0):
            raise ValueError(f"values must lie strictly between 0 and 1 (SGLang's range), got {lo}..{hi}")
        return dim

    @field_validator(
        "cuda_graph_max_bs",
        "max_running_requests",
        "speculative_num_steps",
        "speculative_eagle_topk",
        "speculative_num_draft_tokens",
    )
    @classmethod
    def _whole_positive(cls, dim: IntDim) -> IntDim:
        lo, _ = _dim_bounds(dim)
        if lo < 1:
            raise ValueError(f"values must be at least 1, got {lo}")
        if isinstance(dim, Choices) and any(float(c) != int(c) for c in dim.choices):
            raise ValueError("choices must be whole numbers")
        return dim

    @model_validator(mode="after")
    def _bounds(self) -> SearchSpace:
        steps_lo, _ = _dim_bounds(self.speculative_num_steps)
        _, draft_hi = _dim_bounds(self.speculative_num_draft_tokens)
        if draft_hi < steps_lo + 1 and _dim_bounds(self.speculative_eagle_topk)[1] > 1:
            raise ValueError(
                "speculative_num_draft_tokens: its largest value must be at least "
                "speculative_num_steps + 1 (SGLang verifies steps + 1 tokens at least)"
            )
        return self


def _dim_bounds(dim: FloatRange | IntRange | Choices) -> tuple[float, float]:
    if isinstance(dim, Choices):
        return min(dim.choices), max(dim.choices)
    return dim.low, dim.high


class KnownGood(_Model):
    """A configuration known to work (from earlier runs or a colleague): tried first."""

    mem_fraction_static: float = Field(gt=0, lt=1)
    cuda_graph_max_bs: int = Field(ge=1)
    max_running_requests: int = Field(ge=1)
    speculative_num_steps: int = Field(ge=1)
    speculative_eagle_topk: int = Field(ge=1)
    speculative_num_draft_tokens: int | None = Field(default=None, ge=2)

    def to_config(self) -> ServerConfig:
        return make_config(
            self.mem_fraction_static,
            self.cuda_graph_max_bs,
            self.max_running_requests,
            self.speculative_num_steps,
            self.speculative_eagle_topk,
            self.speculative_num_draft_tokens,
        )


class ModelSpec(_Model):
    path: str = Field(min_length=1, description="--model-path on the nodes")
    draft_path: str = Field(min_length=1, description="--speculative-draft-model-path on the nodes")
    speculative_algorithm: Literal["EAGLE3", "EAGLE"] = "EAGLE3"
    check_paths: bool = Field(
        default=True, description="check on each node that the paths exist before launching (sglang backend)"
    )


class ServerSpec(_Model):
    flags: list[str] = Field(default_factory=list, description="fixed SGLang flags, as an argument list")
    host: str = "127.0.0.1"
    python: str = Field(default="", description="interpreter on the nodes; empty = the worker's own")
    env: dict[str, str] = Field(default_factory=dict)
    enable_metrics: bool = False

    @field_validator("flags", mode="before")
    @classmethod
    def _split_string(cls, value: Any) -> Any:
        # A single string is split like a shell would, but it is never run through one.
        return shlex.split(value) if isinstance(value, str) else value

    @field_validator("flags")
    @classmethod
    def _no_owned_flags(cls, flags: list[str]) -> list[str]:
        for flag in flags:
            name = flag.split("=", 1)[0]
            if name in OWNED_FLAGS:
                raise ValueError(
                    f"{name} is set by the sweep (searched, or fixed by the spec's model/node sections); "
                    "remove it from server.flags"
                )
        return flags


class SimulatedSpec(_Model):
    profile: str | dict[str, Any] = Field(description="a built-in profile name, a YAML path, or a mapping")
    seed: int = 0


class NodeSpec(_Model):
    gpus: int = Field(ge=1, description="GPUs per node; a trial claims all of them (--tp-size)")
    clean_threshold_mib: float = Field(default=1024.0, ge=0)


class WorkloadSpec(_Model):
    num_prompts: int = Field(ge=1)
    input_len: int = Field(ge=1)
    output_len: int = Field(ge=1)
    concurrency: list[Annotated[int, Field(ge=1)]] = Field(min_length=1)
    vocab_size: int = Field(default=32000, ge=2)
    range_ratio: float = Field(default=1.0, gt=0, le=1)
    seed: int = 0
    warmup_prompts: int = Field(default=2, ge=0)

    @field_validator("concurrency")
    @classmethod
    def _sorted(cls, levels: list[int]) -> list[int]:
        # Stages run from light to heavy so a pruner sees comparable intermediate values first.
        return sorted(set(levels))


class ObjectiveSpec(_Model):
    metric: Literal["output_tok_per_s"] = "output_tok_per_s"
    itl_p99_ms_max: float | None = Field(
        default=None, gt=0, description="a stage over this SLA does not count"
    )
    ttft_p99_ms_max: float | None = Field(default=None, gt=0)


class TimeoutSpec(_Model):
    startup_s: float = Field(default=1800.0, gt=0)
    benchmark_s: float = Field(default=900.0, gt=0)
    gpu_clean_s: float = Field(default=60.0, ge=0)
    stop_s: float = Field(default=30.0, gt=0)
    hang_after_error_s: float = Field(default=15.0, gt=0)


class BudgetSpec(_Model):
    trials: int = Field(default=20, ge=1)
    baseline: bool = Field(default=False, description="also run one trial without speculation")


# A study name is a folder under --out and an MLflow experiment: one plain path component.
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"


class SweepSpec(_Model):
    name: str = Field(min_length=1, pattern=NAME_PATTERN)
    backend: Backend
    node: NodeSpec
    model: ModelSpec
    server: ServerSpec = Field(default_factory=ServerSpec)
    simulated: SimulatedSpec | None = None
    search: SearchSpace
    known_good: list[KnownGood] = Field(default_factory=list)
    workload: WorkloadSpec
    objective: ObjectiveSpec = Field(default_factory=ObjectiveSpec)
    budget: BudgetSpec = Field(default_factory=BudgetSpec)
    timeouts: TimeoutSpec = Field(default_factory=TimeoutSpec)
    sampler_seed: int = 0

    @model_validator(mode="after")
    def _backend_section(self) -> SweepSpec:
        if self.backend is Backend.SIMULATED and self.simulated is None:
            raise ValueError(
                "backend is 'simulated' but there is no 'simulated:' section; add one with a profile"
            )
        return self


def make_config(
    mem_fraction_static: float,
    cuda_graph_max_bs: int,
    max_running_requests: int,
    steps: int | None = None,
    topk: int | None = None,
    draft_tokens: int | None = None,
) -> ServerConfig:
    """Build a configuration applying SGLang's own rules to the speculative values."""
    if steps is not None:
        if topk is None:
            raise SpecError("speculative_eagle_topk: set it together with speculative_num_steps")
        if topk == 1 or draft_tokens is None:
            draft_tokens = steps + 1  # SGLang forces this for top-k 1 (with a warning)
        if draft_tokens < 2:
            raise SpecError("speculative_num_draft_tokens: must be at least 2")
    return ServerConfig(
        mem_fraction_static=round(float(mem_fraction_static), 4),
        cuda_graph_max_bs=int(cuda_graph_max_bs),
        max_running_requests=int(max_running_requests),
        speculative_num_steps=steps,
        speculative_eagle_topk=topk,
        speculative_num_draft_tokens=draft_tokens,
    )


def _describe(err: ValidationError, source: str) -> str:
    lines = [f"{source}: the spec is not valid:"]
    for item in err.errors():
        where = ".".join(str(p) for p in item["loc"]) or "(top level)"
        msg = item["msg"]
        if item["type"] == "extra_forbidden":
            msg = "unknown key; check its spelling against trials/demo.yaml"
        elif item["type"] == "missing":
            msg = "required; add it"
        lines.append(f"  - {where}: {msg}")
    return "\n".join(lines)


def parse_spec(data: Any, source: str = "spec") -> SweepSpec:
    if not isinstance(data, dict):
        raise SpecError(f"{source}: the spec must be a YAML mapping at the top level")
    try:
        return SweepSpec.model_validate(data)
    except ValidationError as err:
        raise SpecError(_describe(err, source)) from None


def load_spec(path: Path | str) -> SweepSpec:
    path = Path(path)
    if not path.is_file():
        raise SpecError(f"{path}: no such spec file; see trials/ for examples")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        raise SpecError(f"{path}: malformed YAML: {err}") from None
    spec = parse_spec(data, str(path))
    return _resolve_relative_paths(spec, path.parent)


def _resolve_relative_paths(spec: SweepSpec, base: Path) -> SweepSpec:
    """Model paths written relative to the spec (e.g. trials/models/...) become absolute."""
    updates: dict[str, str] = {}
    for field_name in ("path", "draft_path"):
        value = getattr(spec.model, field_name)
        if value.startswith("./") or value.startswith("../"):
            updates[field_name] = str((base / value).resolve())
    if not updates:
        return spec
    return spec.model_copy(update={"model": spec.model.model_copy(update=updates)})
