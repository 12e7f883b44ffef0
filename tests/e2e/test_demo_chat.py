"""The chat demo end to end: text through the chat template, the policy searched, the lossless check."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from e2ehelp import sweep
from mlflow.tracking import MlflowClient

from orchestrator.driver.answer.best_file import BestFile

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_chat_demo_records_traffic_and_refuses_to_recommend_a_lossy_draft(tmp_path: Path) -> None:
    data = yaml.safe_load((ROOT / "trials" / "demo-chat.yaml").read_text())
    data["simulated"]["profile"] = {"base": "kimi-k25-rtxpro6000", "lossy_rate": 0.3}
    data["budget"]["trials"] = 3
    data["workload"]["concurrency"] = [8]
    # The users' known-good tree once more with tiers built from its 3 steps, so an adaptive trial always
    # runs (with a smaller fraction and graphs up to bs 64: every extra tier is another set of graphs).
    extra = {"mem_fraction_static": 0.84, "cuda_graph_max_bs": 64, "speculative_adaptive": "tiers"}
    data["known_good"].append({**data["known_good"][0], **extra})
    data["known_good"][1].pop("speculative_num_draft_tokens")
    spec = tmp_path / "chat.yaml"
    spec.write_text(yaml.safe_dump(data))
    out = tmp_path / "runs"
    proc = sweep(spec, out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "!!! LOSSY SPECULATION" in proc.stdout + proc.stderr

    client = MlflowClient(tracking_uri=f"sqlite:///{out / 'mlflow.db'}")
    exp = client.get_experiment_by_name("demo-chat")
    assert exp is not None
    trials = [r for r in client.search_runs([exp.experiment_id]) if "optuna_trial_number" in r.data.tags]
    done = [r for r in trials if r.data.tags["status"] == "ok"]
    assert len(done) >= 2
    for run in done:
        assert run.data.params["dataset"] == "generated-chat"
        assert run.data.params["speculative_adaptive"] in ("off", "default", "tiers")
        assert run.data.metrics["output_tok_per_s.generated-chat"] > 0
    speculative = [r for r in done if r.data.params.get("speculative_algorithm") != "none"]
    assert speculative and all(r.data.tags["lossless"] == "mismatch" for r in speculative)
    assert all(r.data.metrics["accept_length.generated-chat"] > 2.0 for r in speculative)
    # Each adaptive trial says how often the server switched tiers (as SGLang 0.5.17 prints it, see
    # tests/server/test_chat_h200.py); a fixed tree has no such metric.
    adaptive = [r for r in speculative if r.data.params["speculative_adaptive"] != "off"]
    assert adaptive
    assert all(r.data.metrics["adaptive_switches"] > 0 for r in adaptive)
    assert all("adaptive_switches" not in r.data.metrics for r in speculative if r not in adaptive)

    # Every draft was lossy: no speculative configuration is recommended; the answer is the server
    # without speculation, measured, with a command that has no speculative flag.
    assert "no speculative configuration passed the lossless check" in proc.stdout
    assert "best: serve without speculation: trial 0" in proc.stdout
    best = BestFile.read(out / "demo-chat")
    assert best is not None and best.nospec and best.launches == [0]
    assert not any(arg.startswith("--speculative") for arg in best.command)
    assert "Lossy speculation" in (out / "demo-chat" / "report.html").read_text()
