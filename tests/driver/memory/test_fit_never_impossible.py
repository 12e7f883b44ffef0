"""`specsweep fit` never prints the impossible: no negative size, no fraction outside (0, 1); a launch that
cannot start "does not fit", with the reason and the smallest tp or GPU that would; where SGLang's prefill
graph gate splits the fractions that fit in two, both ranges; and input it cannot answer is refused.

Seen: DeepSeek-V3 at tp 1 printed `free after the pools -488.02 GiB` and a floor fraction of 4.5081; the 8B
on 8000 MiB `left -11.19 GiB`; s3k2d6 at graph bs 32 `ceiling fraction 0.9667 (above, the CUDA graphs no
longer fit)` while it fit at 0.98 and 0.99; `--sglang-version banana`, a draft as the target and
`--concurrency 0` were answered."""

from __future__ import annotations

import json
import re

import pytest

from orchestrator.driver.memory.fit import main
from tests.driver.memory.test_fit_cli import DEEPSEEK_V3, DRAFT, H200, TARGET

TREE_S3K2D6 = [
    "--draft",
    DRAFT,
    "--steps",
    "3",
    "--topk",
    "2",
    "--draft-tokens",
    "6",
    "--cuda-graph-max-bs",
    "32",
]
IMPOSSIBLE = {
    "weights beyond one GPU": [DEEPSEEK_V3, *H200, "--fraction", "0.85"],
    "a GPU too small": [TARGET, "--gpu-memory-mib", "8000", "--fraction", "0.9"],
    "graphs beyond the room": [TARGET, *H200, "--fraction", "0.97", *TREE_S3K2D6],
    "no KV pool at a low fraction": [TARGET, *H200, "--fraction", "0.05", *TREE_S3K2D6],
}
NEGATIVE = re.compile(r"(?<![\w.])-\d")
FRACTION = re.compile(r"\d+\.\d{3,}")  # fractions print 3 or 4 decimals, sizes 1 or 2


def table(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, dict[str, str]]:
    rc = main(argv)
    rows = {}
    for line in capsys.readouterr().out.splitlines():
        key, _, value = line.partition("  ")
        rows[key.strip()] = value.strip()
    return rc, rows


@pytest.mark.parametrize("case", list(IMPOSSIBLE))
def test_no_negative_size_and_no_fraction_outside_0_1(case: str, capsys: pytest.CaptureFixture[str]) -> None:
    rc, rows = table(capsys, IMPOSSIBLE[case])
    assert rc == 1, rows
    for key, value in rows.items():
        assert not NEGATIVE.search(value), f"{key}: {value}"
        if "fraction" in key:
            assert all(0 < float(x) < 1 for x in FRACTION.findall(value)), f"{key}: {value}"
    assert rows["fits"].startswith("does not fit: "), rows["fits"]


@pytest.mark.parametrize("case", list(IMPOSSIBLE))
def test_json_holds_no_impossible_figure_either(case: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*IMPOSSIBLE[case], "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    for key, value in out.items():
        if isinstance(value, float) and key.endswith("_gb"):
            assert value >= 0, (key, value)
        if key.endswith("_fraction") and value is not None:
            assert 0 < value < 1, (key, value)
    assert out["fits"] is False and out["short_gb"] > 0


def test_a_gpu_too_small_names_the_smallest_tp_and_gpu_that_would_hold_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    _, rows = table(capsys, IMPOSSIBLE["a GPU too small"])
    verdict = rows["fits"]
    assert "the weights alone (14.97 GiB per GPU at tp 1) exceed" in verdict
    assert "tp 4" in verdict, verdict
    found = re.search(r"a GPU of at least ([\d,]+) MiB", verdict)
    assert found is not None, verdict
    smallest = int(found.group(1).replace(",", ""))
    # That GPU does fit it at this fraction, and one 512 MiB smaller does not.
    _, bigger = table(capsys, [TARGET, "--gpu-memory-mib", str(smallest), "--fraction", "0.9"])
    assert bigger["fits"] == "yes"
    _, smaller = table(capsys, [TARGET, "--gpu-memory-mib", str(smallest - 512), "--fraction", "0.9"])
    assert smaller["fits"].startswith("does not fit")


def test_the_prefill_graph_gate_splits_the_fractions_that_fit_in_two(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # SGLang 0.5.17 captures the prefill graphs only when 4 GiB are free after the set-up: at 0.97 they are
    # captured and do not fit; at 0.98 less is free, they are skipped, and the launch starts.
    below = table(capsys, [TARGET, *H200, "--fraction", "0.95", *TREE_S3K2D6])[1]
    gap = table(capsys, [TARGET, *H200, "--fraction", "0.97", *TREE_S3K2D6])[1]
    above = table(capsys, [TARGET, *H200, "--fraction", "0.98", *TREE_S3K2D6])[1]
    assert below["fits"] == "yes" and above["fits"] == "yes" and gap["fits"].startswith("does not fit")
    ranges = re.findall(r"(\d\.\d{4})-(\d\.\d{4})", above["fractions that fit"])
    assert len(ranges) == 2, above["fractions that fit"]
    (lo1, hi1), (lo2, hi2) = ((float(a), float(b)) for a, b in ranges)
    assert lo1 < 0.95 < hi1 < 0.97 < lo2 < 0.98 < 0.99 < hi2 < 1
    assert "prefill CUDA graphs" in above["fractions that fit"] and "4.0 GiB" in above["fractions that fit"]
    assert below["fractions that fit"] == above["fractions that fit"] == gap["fractions that fit"]
    assert "fits at --fraction" in gap["fits"], gap["fits"]
    assert "ceiling fraction" not in above  # one ceiling is what misled: the ranges replace it


def test_without_a_draft_no_draft_lines(capsys: pytest.CaptureFixture[str]) -> None:
    _, rows = table(capsys, [TARGET, *H200, "--fraction", "0.85"])
    assert "draft weights" not in rows
    assert "draft" not in rows["serving peak"] and "(target + draft)" not in rows["KV pool"]


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        (["--sglang-version", "banana"], "--sglang-version banana"),
        (["--sglang-version", "0.4.0"], "--sglang-version 0.4.0"),
        (["--sglang-version", "0.9.1"], "--sglang-version 0.9.1"),
        (["--concurrency", "0"], "--concurrency 0"),
    ],
)
def test_input_it_cannot_answer_is_refused_naming_the_flag(
    extra: list[str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([TARGET, *H200, "--fraction", "0.85", *extra]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {named}: "), err


def test_supported_versions_are_answered(capsys: pytest.CaptureFixture[str]) -> None:
    for version in ("0.5.5", "0.5.9", "0.5.17.post1", "0.5.23"):
        assert main([TARGET, *H200, "--fraction", "0.85", "--sglang-version", version]) == 0, version
    capsys.readouterr()


def test_a_draft_given_as_the_target_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    # It answered with a KV pool of 30 million tokens: one layer's worth.
    assert main([DRAFT, *H200, "--fraction", "0.85"]) == 2
    err = capsys.readouterr().err
    assert "EAGLE-3 draft" in err and "--draft" in err and DRAFT in err, err


def test_a_missing_config_json_is_named_once(tmp_path: object, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(tmp_path), *H200, "--fraction", "0.85"]) == 2
    err = capsys.readouterr().err
    assert err.count("config.json") == 1 and "not found" in err, err
