"""The sweep spec: what to search, on what, against which workload.

A spec is YAML validated into pydantic models. Every error names the field and says how to fix it, and
all of it happens on the driver before any GPU is claimed.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import Field, ValidationError, ValidationInfo, field_validator, model_validator

from orchestrator.spec import engine_catalog as catalog
from orchestrator.spec.dataset_ref import DatasetRef, parse_ref, resolve_source
from orchestrator.spec.engine_catalog import EngineName
from orchestrator.spec.errors import NAME_PATTERN as NAME_PATTERN  # the CLI checks --study against it
from orchestrator.spec.errors import describe
from orchestrator.spec.fixed_flags import ServerFacts, read_facts
from orchestrator.spec.model_checks import model_problems
from orchestrator.spec.own_values import own_value_problems
from orchestrator.spec.search import (
    Choices,
    KnownGood,
    SearchSpace,
    SpecError,
    SpecModel,
    known_good_problems,
    searched_fields,
)
from orchestrator.spec.server_spec import ServerSpec as ServerSpec
from orchestrator.spec.unique_yaml import DuplicateKeyError, load_yaml, yaml_error_text

# The flags SGLang's trials own (each engine has its own: `engine_catalog.owned_flags`).
OWNED_FLAGS: frozenset[str] = catalog.owned_flags(EngineName.SGLANG)


# What a stage needs on real hardware to measure the server rather than its ramp-up.
MIN_STAGE_S = 20.0
MIN_STAGE_TOKENS = 5000


class Backend(StrEnum):
    """Where the engine runs, as the spec's `backend:` says it. `sglang` (SGLang on real GPUs, older
    specs' word) and `real` are the same node kind; which engine is the spec's `engine:`."""

    SGLANG = "sglang"
    REAL = "real"
    SIMULATED = "simulated"


# The backends that run SGLang and no other engine: what each means, and the fix when the spec names
# another engine (one rule, so that a new SGLang-only backend says the same kind of thing).
_SGLANG_ONLY_BACKENDS: dict[Backend, tuple[str, str]] = {
    Backend.SIMULATED: ("simulates SGLang only", "use backend: real, or engine: sglang"),
    Backend.SGLANG: ("means SGLang on real GPUs", "write backend: real"),
}


class NodeKind(StrEnum):
    """Real GPUs, or the simulated node (the simulated SGLang server on fake GPUs)."""

    REAL = "real"
    SIMULATED = "simulated"


class ModelSpec(SpecModel):
    path: str = Field(min_length=1, description="--model-path on the nodes")
    draft_path: str = Field(min_length=1, description="--speculative-draft-model-path on the nodes")
    speculative_algorithm: Literal["EAGLE3", "EAGLE"] = "EAGLE3"
    check_paths: bool = Field(
        default=True, description="check on each node that the paths exist before launching (real nodes)"
    )


class SimulatedSpec(SpecModel):
    profile: str | dict[str, Any] = Field(description="a built-in profile name, a YAML path, or a mapping")
    seed: int = 0


class NodeSpec(SpecModel):
    gpus: int = Field(ge=1, description="GPUs per node; a trial claims all of them (--tp-size)")
    clean_threshold_mib: float = Field(default=1024.0, ge=0)


class MemorySpec(SpecModel):
    prior: bool = Field(
        default=True,
        description="predict each configuration's memory from the models' config.json before launching "
        "(orchestrator.driver.memory.prior); false: learn from launches only (an exotic model)",
    )
    gpu_memory_mib: float | None = Field(
        default=None,
        gt=0,
        description="one GPU's total memory for the prior on real nodes; unset: the driver's NVML, "
        "else the first launch's GPU check",
    )


class WeightedDataset(SpecModel):
    """One dataset of a mix: its share of the requests is its weight over the sum of the weights."""

    source: str = Field(description="random, generated-chat, 'sharegpt: PATH' or 'jsonl: PATH'")
    weight: float = Field(default=1.0, gt=0)

    @field_validator("source")
    @classmethod
    def _known(cls, source: str) -> str:
        parse_ref(source)  # ValueError names the accepted forms
        return source


class WorkloadSpec(SpecModel):
    dataset: str | list[WeightedDataset] = Field(
        default="random",
        description="the prompts: one dataset, or a list of {source, weight} sent mixed by weight",
    )
    tokenizer: str = Field(
        default="",
        description="folder with the model's tokenizer for text datasets, on the driver and the nodes "
        "alike (read on both); empty = model.path (the simulated backend: its built-in tokenizer)",
    )
    num_prompts: int = Field(ge=1)
    input_len: int = Field(ge=1)
    output_len: int = Field(ge=1)
    concurrency: list[Annotated[int, Field(ge=1)]] = Field(min_length=1)
    vocab_size: int = Field(default=32000, ge=2)
    range_ratio: float = Field(default=1.0, gt=0, le=1)
    seed: int = 0
    warmup_prompts: int = Field(default=2, ge=0)
    # A stage cycles through its prompts until it has run this long and produced this many output
    # tokens: shorter stages measure their ramp-up (a sub-second stage moves about 15 % between repeats).
    min_stage_s: float = Field(default=MIN_STAGE_S, ge=0)
    min_stage_tokens: int = Field(default=MIN_STAGE_TOKENS, ge=0)

    @field_validator("concurrency")
    @classmethod
    def _sorted(cls, levels: list[int]) -> list[int]:
        # Stages run from light to heavy so a pruner sees comparable intermediate values first.
        return sorted(set(levels))

    @field_validator("dataset")
    @classmethod
    def _datasets_known(cls, dataset: str | list[WeightedDataset]) -> str | list[WeightedDataset]:
        if isinstance(dataset, str):
            parse_ref(dataset)
        elif not dataset:
            raise ValueError("an empty list: name at least one dataset, or write dataset: random")
        return dataset

    def datasets(self) -> list[tuple[DatasetRef, float]]:
        """Each dataset of the workload with its weight (1.0 for a single one)."""
        if isinstance(self.dataset, str):
            return [(parse_ref(self.dataset), 1.0)]
        return [(parse_ref(d.source), d.weight) for d in self.dataset]

    @property
    def dataset_label(self) -> str:
        """The mix in one line, for MLflow's ``dataset`` param: ``generated-chat`` or ``a 0.7, b 0.3``."""
        pairs = self.datasets()
        if len(pairs) == 1:
            return str(pairs[0][0])
        total = sum(w for _, w in pairs)
        return ", ".join(f"{ref} {w / total:.2g}" for ref, w in pairs)


class ObjectiveSpec(SpecModel):
    metric: Literal["output_tok_per_s"] = "output_tok_per_s"
    itl_p99_ms_max: float | None = Field(
        default=None, gt=0, description="a stage over this SLA does not count"
    )
    ttft_p99_ms_max: float | None = Field(default=None, gt=0)


class TimeoutSpec(SpecModel):
    startup_s: float = Field(default=1800.0, gt=0)
    benchmark_s: float = Field(default=900.0, gt=0)
    gpu_clean_s: float = Field(default=60.0, ge=0)
    stop_s: float = Field(default=30.0, gt=0)
    hang_after_error_s: float = Field(default=15.0, gt=0)


class BudgetSpec(SpecModel):
    trials: int = Field(default=20, ge=1)
    # On by default: the server without speculation is a candidate answer (a weak draft or a heavy load
    # makes it the fastest), for one launch that the budget does not count.
    baseline: bool = Field(default=True, description="also run one trial without speculation")
    # Kept back from `trials` for the end of the sweep: the best `confirm_top` configurations are launched
    # again until each has `confirm_repeats` launches, and ranked by their median (0 turns it off).
    confirm_top: int = Field(default=3, ge=0)
    confirm_repeats: int = Field(default=3, ge=1)
    # Off: every launch runs every stage (a grid measured as the truth of a pair, or answers read per
    # concurrency level); the pruner otherwise stops a launch already clearly worse after two stages.
    prune: bool = Field(default=True, description="stop a launch already clearly worse after two stages")


class SweepSpec(SpecModel):
    name: str = Field(min_length=1, pattern=NAME_PATTERN)
    # Declared before `server`: its flags are checked against this engine's own.
    engine: str = Field(default=EngineName.SGLANG.value, description="the inference engine a trial launches")
    backend: Backend
    node: NodeSpec
    model: ModelSpec
    server: ServerSpec = Field(default_factory=ServerSpec)
    simulated: SimulatedSpec | None = None
    memory: MemorySpec = Field(default_factory=MemorySpec)
    search: SearchSpace
    known_good: list[KnownGood] = Field(default_factory=list)
    workload: WorkloadSpec
    objective: ObjectiveSpec = Field(default_factory=ObjectiveSpec)
    budget: BudgetSpec = Field(default_factory=BudgetSpec)
    timeouts: TimeoutSpec = Field(default_factory=TimeoutSpec)
    sampler_seed: int = 0

    @field_validator("engine")
    @classmethod
    def _known_engine(cls, engine: str) -> str:
        if engine not in catalog.names():
            raise ValueError(f"unknown engine {engine!r}; choose one of: {', '.join(catalog.names())}")
        return engine

    @field_validator("server")
    @classmethod
    def _no_owned_flags(cls, server: ServerSpec, info: ValidationInfo) -> ServerSpec:
        engine = info.data.get("engine")
        if engine is None:  # itself invalid, and reported as such
            return server
        name = server.owned_flag(catalog.owned_flags(engine))
        if name is not None:
            raise ValueError(
                f"{name} is set by the sweep (searched, or fixed by the spec's model/node sections); "
                "remove it from server.flags"
            )
        return server

    @model_validator(mode="after")
    def _backend_section(self) -> SweepSpec:
        if self.backend is Backend.SIMULATED and self.simulated is None:
            raise ValueError(
                "backend is 'simulated' but there is no 'simulated:' section; add one with a profile"
            )
        only_sglang = _SGLANG_ONLY_BACKENDS.get(self.backend)
        if only_sglang is not None and self.engine != EngineName.SGLANG:
            what, fix = only_sglang
            raise ValueError(f"backend '{self.backend.value}' {what}, and engine is {self.engine!r}; {fix}")
        return self

    @model_validator(mode="after")
    def _flags_readable_by_the_engine(self) -> SweepSpec:
        """The engine's typed flags (its chunk size, KV dtype, API key) read at load, so that a value the
        driver cannot read is refused before any GPU is claimed."""
        try:
            _ = self.server_facts
        except ValueError as err:
            raise ValueError(f"server.flags: {err}") from None
        return self

    @property
    def server_facts(self) -> ServerFacts:
        """What the driver reads typed from `server.flags`, in this engine's spelling (`engine_catalog`)."""
        return read_facts(self.server.fixed, catalog.reading(self.engine))

    @model_validator(mode="after")
    def _searched_by_the_engine(self) -> SweepSpec:
        """A value searched over several values that the engine has no flag for would launch one server
        under several names; refused, naming the engine's own fields."""
        space = catalog.space(self.engine)
        if problem := own_value_problems(self.engine, space, self.search.engine):
            raise ValueError(problem)
        unknown = space.unknown(searched_fields(self.search)) if space is not None else []
        if space is not None and unknown:
            raise ValueError(
                f"search: the {self.engine} engine has no {', '.join(unknown)}; give "
                f"{'it one value' if len(unknown) == 1 else 'each one value'} (choices: [x]), or search only "
                f"the engine's fields: {', '.join(space.names)}"
            )
        return self

    @model_validator(mode="after")
    def _workload_fits_the_search(self) -> SweepSpec:
        """Levels the server could never run as asked, refused: the stage would be measured and reported
        under a concurrency it never had."""
        wl = self.workload
        heaviest = max(wl.concurrency)
        mrr = self.search.max_running_requests
        most = int(max(mrr.choices) if isinstance(mrr, Choices) else mrr.high)
        if heaviest > most:
            raise ValueError(
                f"workload.concurrency: {heaviest} is above every searched max_running_requests (at most "
                f"{most}): the server never runs more than {most} requests at once, so that stage would be "
                f"reported as {heaviest} concurrent; give levels of at most {most}, or search "
                f"max_running_requests up to {heaviest}"
            )
        return self

    @property
    def node_kind(self) -> NodeKind:
        return NodeKind.SIMULATED if self.backend is Backend.SIMULATED else NodeKind.REAL


def parse_spec(data: Any, source: str = "spec") -> SweepSpec:
    if not isinstance(data, dict):
        raise SpecError(f"{source}: the spec must be a YAML mapping at the top level")
    try:
        spec = SweepSpec.model_validate(data)
    except ValidationError as err:
        raise SpecError(describe(err, source, data)) from None
    problems = [
        p for i, known in enumerate(spec.known_good) for p in known_good_problems(known, spec.search, i)
    ]
    if problems:
        lines = [f"{source}: the spec is not valid:"] + [f"  - {p}" for p in problems]
        raise SpecError("\n".join(lines))
    return spec


EXAMPLE_SPEC = Path(__file__).resolve().parents[2] / "trials" / "demo.yaml"  # the checkout's demo


def load_spec(path: Path | str) -> SweepSpec:
    path = Path(path)
    if path.is_dir():
        # Suggest only files that exist: the folder's own specs, else the checkout's examples.
        held = sorted(path.glob("*.yaml"))
        held = sorted(held, key=lambda p: p.name != "demo.yaml")[:3]
        if held:
            such = " or ".join(str(p) for p in held)
            raise SpecError(f"{path}: a folder, not a spec file; give a YAML file such as {such}")
        example = (
            f"such as {EXAMPLE_SPEC}" if EXAMPLE_SPEC.is_file() else "(the project's trials/ holds examples)"
        )
        raise SpecError(f"{path}: a folder, not a spec file, and it holds no .yaml file; give one {example}")
    if not path.is_file():
        raise SpecError(f"{path}: no such spec file; see trials/ for examples")
    try:
        data = load_yaml(path.read_text())
    except DuplicateKeyError as err:
        raise SpecError(f"{path}: {err.problem}") from None
    except yaml.YAMLError as err:
        raise SpecError(f"{path}: malformed YAML {yaml_error_text(err)}") from None
    spec = _resolve_relative_paths(parse_spec(data, str(path)), path.parent)
    if spec.node_kind is NodeKind.REAL:
        # What SGLang would refuse once its processes hold the GPUs, refused here from config.json.
        problems = model_problems(spec.model.path, spec.model.draft_path, spec.node.gpus)
        if problems:
            lines = [f"{path}: the spec cannot run:"] + [f"  - {p}" for p in problems]
            raise SpecError("\n".join(lines))
    return spec


def _resolve_relative_paths(spec: SweepSpec, base: Path) -> SweepSpec:
    """Model paths written relative to the spec (e.g. trials/models/...) become absolute."""
    updates: dict[str, str] = {}
    for field_name in ("path", "draft_path"):
        value = getattr(spec.model, field_name)
        if value.startswith("./") or value.startswith("../"):
            updates[field_name] = str((base / value).resolve())
    if updates:
        spec = spec.model_copy(update={"model": spec.model.model_copy(update=updates)})
    sim = spec.simulated
    if sim is not None and isinstance(sim.profile, str) and sim.profile.endswith((".yaml", ".yml", ".json")):
        # A profile file is read from beside the spec, whatever folder the sweep is started in.
        beside = (base / sim.profile).resolve()
        if beside.is_file():
            spec = spec.model_copy(update={"simulated": sim.model_copy(update={"profile": str(beside)})})
    return _resolve_dataset_paths(spec, base)


def _resolve_dataset_paths(spec: SweepSpec, base: Path) -> SweepSpec:
    """Dataset files and the tokenizer folder, when relative, are read from beside the spec."""
    wl = spec.workload
    dataset: str | list[WeightedDataset] = (
        resolve_source(wl.dataset, base)
        if isinstance(wl.dataset, str)
        else [d.model_copy(update={"source": resolve_source(d.source, base)}) for d in wl.dataset]
    )
    tokenizer = str((base / wl.tokenizer).resolve()) if wl.tokenizer else ""
    workload = wl.model_copy(update={"dataset": dataset, "tokenizer": tokenizer})
    return spec.model_copy(update={"workload": workload})
