"""The CLI's own flags, checked before anything starts: each error names the flag and the fix."""

from __future__ import annotations

import argparse
from pathlib import Path

from orchestrator.driver.destinations import check_study_name
from orchestrator.spec import NodeKind, SweepSpec
from orchestrator.spec_search import SpecError

# The package's checkout: the default spec is found from any folder, not only the repository's root.
REPO_ROOT = Path(__file__).resolve().parents[2]  # orchestrator/driver/ -> the checkout
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


def check_local_model_paths(spec: SweepSpec, ray_address: str | None) -> None:
    """With no --ray-address the trial node is this machine: a missing model is found before Ray starts
    (on a cluster, each node is asked once Ray is up, before any GPU is claimed)."""
    if ray_address or spec.node_kind is not NodeKind.REAL or not spec.model.check_paths:
        return
    for field, value in (("model.path", spec.model.path), ("model.draft_path", spec.model.draft_path)):
        if not Path(value).exists():
            raise SpecError(
                f"{field}: {value} does not exist on this machine (the local node); copy the model there, "
                "fix the path, or set model.check_paths: false"
            )


def check_draft_algorithm(spec: SweepSpec) -> None:
    """An EAGLE-3 draft under EAGLE, refused before anything is created (its folder is read where the
    driver can see it; on a cluster the nodes' copy is not checked here)."""
    from orchestrator.driver.diagnosis import check_draft_config

    warning = check_draft_config(spec.model.draft_path, spec.model.speculative_algorithm)
    if warning:
        raise SpecError(f"model.speculative_algorithm: {warning}")
