"""No test folder is named like a package the product imports.

pytest puts test folders on sys.path (they are not packages), so a folder named like a dependency becomes
importable under that name: a `tests/engines/sglang/` made `importlib.util.find_spec("sglang")` find the
tests, and the gpu-check test that runs only where SGLang is missing skipped on every CPU machine.
"""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parent
# The import names of the dependencies (pyproject.toml, its extras included) and what they bring.
IMPORTED = {
    "sglang", "torch", "ray", "optuna", "mlflow", "pynvml", "aiohttp", "pydantic", "plotly", "yaml",
    "psutil", "numpy", "pandas", "transformers", "tokenizers", "safetensors", "jinja2", "optuna_dashboard",
}  # fmt: skip


def test_no_test_folder_shadows_a_dependency() -> None:
    folders = {p for p in TESTS.rglob("*") if p.is_dir() and "fixtures" not in p.relative_to(TESTS).parts}
    assert len(folders) > 5
    assert sorted(str(p.relative_to(TESTS)) for p in folders if p.name in IMPORTED) == []
