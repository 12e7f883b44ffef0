"""The one results table and its helpers."""

from __future__ import annotations

import json
import math

from benchmarks.harness.table import Row, Table, median, ratio


def test_table_helpers() -> None:
    assert median([1.0, math.inf, 3.0]) == 3.0
    assert math.isinf(median([1.0, math.inf]))
    assert ratio(4.0, 2.0) == 2.0 and ratio(math.inf, 2.0) == math.inf and ratio(1.0, math.inf) is None
    assert ratio(0.0, 0.0) == 1.0 and ratio(1.0, 0.0) == math.inf
    table = Table([Row("b", "c|d", "v", "m", math.inf, "> 5", 1.5)], ["a note"])
    md = table.markdown()
    assert "| b | c/d | v | m | > 5 | 1.50 |" in md and "1. a note" in md
    assert json.loads(table.dumps())["rows"][0]["value"] == "inf"
