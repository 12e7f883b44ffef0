"""Where the benchmarks read and write: the repository's root, the results folder and the demo spec.

One place, so that a module's depth in the `benchmarks/` folders never decides where its files go.
"""

from __future__ import annotations

from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1]
ROOT = BENCHMARKS.parent  # the repository: trials/, tests/fixtures/
OUT = BENCHMARKS / "out"  # what a run writes (search.json, results.json); never committed
DEMO_SPEC = ROOT / "trials" / "demo.yaml"  # every case's spec starts from the demo's
