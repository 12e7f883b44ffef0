"""The trials table shows a diagnosis up to its advice; only a longer message is cut, at a word, marked."""

from __future__ import annotations

import re

from orchestrator.report.data import RunReadBack
from orchestrator.report.sections import trials_section

# A graph OOM's diagnosis as the demo's simulated node gave it (570 characters): cut at 300, the table
# showed "... for the CUDA graphs and the rest of st" and never the advice.
DIAGNOSIS = (
    "OOM while capturing the draft's CUDA graphs: the target's weights take 68.02 GiB of 94.04 GiB per GPU, "
    "leaving 26.02 GiB (the draft's 2.24 GiB load later, after the target's graphs); at mem_fraction_static "
    "0.880, 10.42 GiB were free after the KV pool for the CUDA graphs and the rest of start-up (attention "
    "and cuBLAS workspaces, and the draft's weights and KV pool): not enough. A launch at this graph size or "
    "below ran out with 10.42 GiB free there: the memory model now asks for 10.68 GiB (10.43 GiB, above "
    "that, and its 0.25 GiB margin). Lower mem_fraction_static to 0.877."
)


def _cell(message: str) -> str:
    row = RunReadBack(3, "r3", "oom", "mf0.880 gbs64 mrr16 s5k4d12", diagnosis=message)
    shown = re.search(r'<div class="msg" title="[^"]*">(.*?)</div>', trials_section([row]))
    assert shown is not None
    return shown.group(1)


def test_a_diagnosis_is_shown_with_its_advice() -> None:
    assert _cell(DIAGNOSIS).endswith("Lower mem_fraction_static to 0.877.")


def test_a_long_message_is_cut_at_a_word_and_marked() -> None:
    shown = _cell("word " * 400)
    assert shown.endswith(" …") and len(shown) <= 602 and "wor …" not in shown


def test_every_figure_column_names_its_unit() -> None:
    """Seen: the report's trials table headed "p99 TTFT", "p99 ITL" and "start-up s" where the console and
    the best configuration's table say ms and s."""
    row = RunReadBack(3, "r3", "ok", "mf0.880 gbs64 mrr16 s2k1d3")
    head = re.findall(r"<th>(.*?)</th>", trials_section([row]))
    for name in ("tok/s", "p99 TTFT (ms)", "p99 ITL (ms)", "start-up (s)"):
        assert name in head, head
