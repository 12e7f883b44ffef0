"""The acceptance tool end to end on the simulated node: several servers at once, the product's client, the
product's accept-length rule, every server stopped. The simulated node stands in for SGLang here (same
flags, log and HTTP API); the tool's real run is on the GPU node (`tools/pair/on-node.sh accept`)."""

from __future__ import annotations

import importlib.util
import json
import socket
import sys
from pathlib import Path
from types import ModuleType

import psutil
import pytest

from tools.pair.acceptance import Tree, parse_trees, run, table
from tools.pair.server import Launcher

MODELS = Path(__file__).resolve().parents[2] / "trials" / "models"


def _make_weights() -> ModuleType:
    spec = importlib.util.spec_from_file_location("make_weights", MODELS / "make_weights.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["make_weights"] = module
    spec.loader.exec_module(module)
    return module


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_tree_labels_parse_and_a_chain_with_the_wrong_budget_is_refused() -> None:
    assert parse_trees("s3k1d4, s2k4d8") == [Tree(3, 1, 4), Tree(2, 4, 8)]
    with pytest.raises(ValueError, match="s3k1d4"):
        parse_trees("s3k1d6")
    with pytest.raises(ValueError, match="sNkNdN"):
        parse_trees("3-1-4")


@pytest.mark.slow
def test_acceptance_on_the_simulated_node(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    target = tmp_path / "target"
    target.mkdir()
    if not _make_weights().write_tokenizer([target], 512):
        pytest.skip("the tokenizers package is not installed")
    dataset = tmp_path / "held.json"
    dataset.write_text(json.dumps([
        {"conversations": [{"from": "human", "value": f"Question {i} about rivers?"},
                           {"from": "gpt", "value": "A river flows to the sea. " * (3 + i)}]}
        for i in range(6)
    ]))  # fmt: skip
    sim = Launcher("orchestrator.sim.server", ("--sim-profile", "h200-llama8b", "--sim-state-dir",
                   str(tmp_path / "gpus"), "--sim-startup-time-scale", "0"))  # fmt: skip
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    result = run(target, target, dataset, tmp_path / "out", parse_trees("s1k1d2,s4k1d5"), [1, 4],
                 max_new_tokens=64, base_port=_free_port(), launcher=sim)  # fmt: skip
    assert set(result.trees) == {"s1k1d2", "s4k1d5"}
    for label, tree in result.trees.items():
        assert tree.error == "", label
        assert [r.concurrency for r in tree.levels] == [1, 4]
        for level in tree.levels:
            assert level.requests == 6 and level.verify_steps > 0
            assert level.accept_length == pytest.approx(
                level.completion_tokens / level.verify_steps, abs=1e-4
            )
    # A chain of four steps accepts more per verify than a chain of one (the simulated draft accepts).
    deep, shallow = result.trees["s4k1d5"].levels[0], result.trees["s1k1d2"].levels[0]
    assert deep.accept_length is not None and shallow.accept_length is not None
    assert deep.accept_length > shallow.accept_length
    assert 1.0 < shallow.accept_length <= 2.0
    # SGLang's own figure from the server log (the simulated node writes SGLang's Decode batch lines).
    assert all(t.log_windows > 0 and (t.log_accept_length or 0) > 1.0 for t in result.trees.values())
    saved = json.loads((tmp_path / "out" / "acceptance.json").read_text())
    assert saved["trees"]["s4k1d5"]["levels"][1]["concurrency"] == 4
    assert table(result)[1].startswith("s1k1d2")
    after = {p.pid for p in psutil.Process().children(recursive=True)}
    assert after - before == set(), "a server outlived the tool"


@pytest.mark.parametrize(
    ("module", "args", "named"),
    [
        ("tools.pair.acceptance", ["nowhere", "nowhere", "none.json", "out"], "target"),
        ("tools.pair.selfdistill", ["nowhere", "out"], "config.json"),
    ],
)
def test_missing_inputs_end_with_exit_2_naming_them(
    tmp_path: Path, module: str, args: list[str], named: str
) -> None:
    import subprocess

    repo = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-m", module, *[str(tmp_path / a) for a in args]],
        capture_output=True,
        text=True,
        cwd=repo,
    )
    assert done.returncode == 2, done.stderr
    assert named in done.stderr and "Traceback" not in done.stderr
