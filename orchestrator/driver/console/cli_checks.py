"""The CLI's own flags, checked before anything starts: each error names the flag and the fix."""

from __future__ import annotations

import argparse
from pathlib import Path

from orchestrator.driver.console.destinations import check_study_name
from orchestrator.spec.model_checks import model_folder_lacks_config, readable_shape
from orchestrator.spec.search import Choices, FloatRange, IntRange, SpecError, make_config
from orchestrator.spec.sweep_spec import NodeKind, SweepSpec

# The package's checkout: the default spec is found from any folder, not only the repository's root.
REPO_ROOT = Path(__file__).resolve().parents[3]  # orchestrator/driver/console/ -> the checkout
DEFAULT_SPEC = Path("trials/demo.yaml")


def resolve_spec_path(given: str) -> Path:
    """The spec as given; the default one, when this folder has no trials/demo.yaml, from the checkout."""
    path = Path(given)
    if path == DEFAULT_SPEC and not path.exists():
        return REPO_ROOT / DEFAULT_SPEC
    return path


def check_run_flags(args: argparse.Namespace) -> None:
    if args.trials is not None and args.trials < 1:
        raise SpecError(
            f"--trials: must be at least 1 (got {args.trials}); leave it out for the spec's budget"
        )
    if args.time_budget is not None and not args.time_budget > 0:
        raise SpecError(
            f"--time-budget: must be a number of seconds above 0 (got {args.time_budget:g}); "
            "leave it out to run the whole trial budget"
        )
    if args.study is not None:
        check_study_name(args.study)
    if args.resume and args.warm_start:
        # A resumed study has its own history; seeding it again was ignored, silently.
        raise SpecError(
            "--warm-start: seeds a new study only, and --resume continues one with its own history; "
            "leave --warm-start out, or start a new study seeded from the earlier ones with "
            "--study NEW_NAME --warm-start"
        )


def check_local_model_paths(spec: SweepSpec, ray_address: str | None) -> None:
    """With no --ray-address the trial node is this machine: a missing model is found before Ray starts
    (on a cluster, each node is asked once Ray is up, before any GPU is claimed)."""
    if ray_address or spec.node_kind is not NodeKind.REAL or not spec.model.check_paths:
        return
    paths = (("model.path", spec.model.path), ("model.draft_path", spec.model.draft_path))
    for field, value in paths:
        if not Path(value).exists():
            raise SpecError(
                f"{field}: {value} does not exist on this machine (the local node); copy the model there, "
                "fix the path, or set model.check_paths: false"
            )
    for field, value in paths:  # both exist: each must be a model SGLang can load
        if model_folder_lacks_config(value):
            raise SpecError(
                f"{field}: {Path(value) / 'config.json'} not found: SGLang loads a model from its folder's "
                "config.json and weights; copy the whole model there or fix the path"
            )


def check_draft_algorithm(spec: SweepSpec) -> None:
    """An EAGLE-3 draft under EAGLE, refused before anything is created (its folder is read where the
    driver can see it; on a cluster the nodes' copy is not checked here)."""
    from orchestrator.driver.search.diagnosis import check_draft_config

    warning = check_draft_config(spec.model.draft_path, spec.model.speculative_algorithm)
    if warning:
        raise SpecError(f"model.speculative_algorithm: {warning}")


def check_weights_fit(spec: SweepSpec) -> None:
    """Weights that alone exceed the node's GPUs at its tp, refused before anything starts with the tp
    that would hold them. Only with `memory.gpu_memory_mib`: the driver's own GPU may not be the nodes'."""
    from orchestrator.driver.memory.build import prior_applies

    gpu_mib = spec.memory.gpu_memory_mib
    if spec.node_kind is not NodeKind.REAL or not prior_applies(spec) or gpu_mib is None:
        return
    target = readable_shape(spec.model.path)
    if target is None:
        return
    from orchestrator.driver.memory.node_facts import kv_dtype_bytes
    from orchestrator.driver.memory.tp_fit import NodeShape, smallest_tp, weights_exceed

    draft = readable_shape(spec.model.draft_path)
    flags = spec.server_facts
    node = NodeShape(
        target,
        draft,
        gpu_mib,
        prefill_graphs=flags.prefill_graphs,
        kv_dtype_bytes=kv_dtype_bytes(flags.kv_cache_dtype),
    )
    search = spec.search
    # The lightest point of the space: the weights decide, not the memory flags.
    config = make_config(
        _high(search.mem_fraction_static),
        int(_low(search.cuda_graph_max_bs)),
        int(_low(search.max_running_requests)),
        int(_low(search.speculative_num_steps)),
        1,
    )
    tp = spec.node.gpus
    facts = node.facts(tp)
    if not weights_exceed(facts, config):
        return
    weights = facts.weights_gib + facts.draft_weights_gib
    advice = smallest_tp(node, config, above=tp)
    where = (
        f"the smallest tp that holds them is {advice.tp} ({advice.weights_gib:.2f} GiB per GPU): "
        f"run on nodes of {advice.tp} GPUs (node.gpus: {advice.tp})"
        if advice
        else "no tp up to 64 that SGLang accepts holds them on these GPUs"
    )
    raise SpecError(
        f"node.gpus: {tp}: the weights alone ({weights:.2f} GiB per GPU at --tp-size {tp}, "
        f"{'target + draft' if draft else 'the target'}) "
        f"exceed what one GPU of {gpu_mib:g} MiB (memory.gpu_memory_mib) has free before loading "
        f"({facts.pre_gib:.2f} GiB): no fraction fits; {where}"
    )


def _low(dim: IntRange | FloatRange | Choices) -> float:
    return min(dim.choices) if isinstance(dim, Choices) else dim.low


def _high(dim: IntRange | FloatRange | Choices) -> float:
    return max(dim.choices) if isinstance(dim, Choices) else dim.high
