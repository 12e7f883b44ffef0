"""The spec's models against what SGLang refuses to build (`launch_rules`), before any GPU is claimed.

Read where the driver sees the models' config.json (a local node, or a cluster whose model folders the
driver shares): a folder it cannot see, or a config.json the memory prior cannot read, is not checked
here (the nodes' own paths are checked once Ray is up, and the prior warns about a file it cannot use).
"""

from __future__ import annotations

from pathlib import Path

from orchestrator.footprint.shape import ModelShape, ShapeError, load_shape
from orchestrator.spec.launch_rules import draft_mismatch, format_by_name_problem, tp_refusal


def readable_shape(model_dir: str) -> ModelShape | None:
    """The model's shape when its config.json is here and readable (None otherwise)."""
    if not (Path(model_dir) / "config.json").is_file():
        return None
    try:
        return load_shape(model_dir)
    except ShapeError:
        return None


def _format_problems(model_path: str, draft_path: str) -> list[str]:
    problems = []
    for field, path in (("model.path", model_path), ("model.draft_path", draft_path)):
        folder = Path(path)
        if folder.is_dir():
            why = format_by_name_problem(
                str(folder), (folder / "config.json").is_file(), (folder / "params.json").is_file()
            )
            if why:
                problems.append(f"{field}: {path}: {why}")
    return problems


def model_folder_lacks_config(path: str) -> bool:
    """A model folder SGLang could not load: it reads the model's config.json first (a path that is not
    a folder, e.g. a hub name, is not judged here)."""
    folder = Path(path)
    return folder.is_dir() and not (folder / "config.json").is_file()


def model_problems(model_path: str, draft_path: str, gpus: int) -> list[str]:
    """One line per field SGLang would refuse: ``node.gpus`` (the tp size), ``model.draft_path`` and a
    model folder whose name SGLang reads as another format."""
    problems = _format_problems(model_path, draft_path)
    target = readable_shape(model_path)
    if target is None:
        return problems
    draft = readable_shape(draft_path)
    why = tp_refusal([target, *([draft] if draft else [])], gpus)
    if why:
        problems.append(
            f"node.gpus: {gpus} (each trial runs with --tp-size {gpus}): {why}; "
            "run on nodes of one of those GPU counts"
        )
    mismatch = draft_mismatch(target, draft) if draft else None
    if mismatch:
        problems.append(f"model.draft_path: {draft_path}: {mismatch}")
    return problems
