"""What each dataset gave a stage (`dataset ...: 16 requests from 5 conversations, 1 skipped (1 empty
conversation)`) was on the console only: the parent MLflow run keeps it, and the report shows it."""

from __future__ import annotations

import json
from pathlib import Path

from mlflow.tracking import MlflowClient

from orchestrator import cli
from orchestrator.bench.traffic import workload_lines
from orchestrator.driver.store.tracking import Tracker
from orchestrator.records import TrialRecord, TrialResult, TrialStatus
from orchestrator.report import write_report
from orchestrator.spec.search import make_config
from orchestrator.spec.sweep_spec import load_spec

ROOT = Path(__file__).resolve().parents[2]


def _chat_spec(tmp_path: Path) -> Path:
    """trials/demo-chat.yaml on a ShareGPT file of five conversations and one empty one."""
    turns = [
        [{"from": "human", "value": f"question {i}, in a few words"}, {"from": "gpt", "value": "an answer"}]
        for i in range(5)
    ]
    sample = tmp_path / "sample.json"
    sample.write_text(json.dumps([{"conversations": t} for t in [*turns, []]]))
    text = (ROOT / "trials" / "demo-chat.yaml").read_text()
    assert "dataset: generated-chat" in text
    spec = tmp_path / "chat.yaml"
    spec.write_text(text.replace("dataset: generated-chat", f'dataset: "sharegpt: {sample}"'))
    return spec


def test_the_datasets_counts_are_in_the_parent_run_and_the_report(tmp_path: Path) -> None:
    spec_path = _chat_spec(tmp_path)
    spec = load_spec(spec_path)
    (line,) = workload_lines(spec)
    assert "from 5 conversations, 1 skipped (1 empty conversation)" in line  # the console's line
    args = cli.build_parser().parse_args([str(spec_path), "--study", "chat"])
    params, tags = cli.parent_run_fields(spec, args, 6, "chat")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = Tracker(uri, "chat", tmp_path / "spool")
    parent = tracker.start("sweep", params, tags)
    result = TrialResult(make_config(0.85, 64, 16, 2, 1, 3), TrialStatus.OK, "node-a", ())
    tracker.log_trial(TrialRecord(number=0, result=result, objective=None))
    run = MlflowClient(tracking_uri=uri).get_run(parent)
    requests = spec.workload.num_prompts
    assert run.data.params["dataset_requests.sharegpt-sample"] == str(requests)
    assert run.data.params["dataset_conversations.sharegpt-sample"] == "5"
    assert run.data.params["dataset_skipped.sharegpt-sample"] == "1"
    assert run.data.tags["dataset_counts"] == line
    page = write_report("chat", uri, f"sqlite:///{tmp_path / 'none.db'}", tmp_path / "report.html")
    assert line in page.read_text()
