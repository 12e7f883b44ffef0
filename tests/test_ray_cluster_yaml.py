"""ray_cluster.yaml against Ray's own schema and launcher checks, and the placement it promises."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import ray
import yaml
from ray.autoscaler._private.util import prepare_config, validate_config

from orchestrator.driver.dispatch.placement import TRIAL_SLOT

CLUSTER_FILE = Path(__file__).resolve().parents[1] / "ray_cluster.yaml"
SCHEMA = Path(ray.autoscaler.__file__).parent / "ray-schema.json"


@pytest.fixture(scope="module")
def text() -> str:
    return CLUSTER_FILE.read_text()


@pytest.fixture(scope="module")
def config(text: str) -> dict[str, Any]:
    loaded = yaml.safe_load(text)
    assert isinstance(loaded, dict)
    return loaded


def _commands(config: dict[str, Any], key: str) -> str:
    return "\n".join(config.get(key, []))


def test_file_matches_rays_schema(config: dict[str, Any]) -> None:
    jsonschema.validate(config, json.loads(SCHEMA.read_text()))


def test_launcher_accepts_it_after_filling_defaults(config: dict[str, Any]) -> None:
    # What `ray up` does before it launches anything: merge the provider's defaults, then validate.
    validate_config(prepare_config(copy.deepcopy(config)))


def test_worker_type_is_a_whole_node_with_one_trial_slot(config: dict[str, Any]) -> None:
    workers = [t for name, t in config["available_node_types"].items() if name != config["head_node_type"]]
    assert workers
    for node_type in workers:
        assert node_type["resources"]["GPU"] == 8
        assert node_type["resources"][TRIAL_SLOT] == 1
        assert node_type["min_workers"] == node_type["max_workers"] >= 1


def test_head_never_takes_a_trial(config: dict[str, Any]) -> None:
    head = config["available_node_types"][config["head_node_type"]]["resources"]
    assert head.get(TRIAL_SLOT, 0) == 0
    assert head.get("GPU", 0) == 0
    assert TRIAL_SLOT not in _commands(config, "head_start_ray_commands")


def test_workers_declare_their_slot_at_ray_start(config: dict[str, Any]) -> None:
    # The on-prem variant has no node types: this flag is the only place the slot is declared there.
    start = _commands(config, "worker_start_ray_commands")
    declared = re.search(r"--resources='([^']*)'", start)
    assert declared is not None
    assert json.loads(declared.group(1)) == {TRIAL_SLOT: 1}


def test_dashboard_bound_to_localhost_only(config: dict[str, Any]) -> None:
    start = _commands(config, "head_start_ray_commands")
    assert "--dashboard-host=127.0.0.1" in start
    assert "0.0.0.0" not in start


def test_token_auth_on_every_node(config: dict[str, Any]) -> None:
    init = _commands(config, "initialization_commands")
    assert "export RAY_AUTH_MODE=token" in init
    assert config["file_mounts"].get("/home/ubuntu/.ray/auth_token") == "~/.ray/auth_token"
    assert config["auth"]["ssh_user"] == "ubuntu"  # the mount target is that user's home


def test_cluster_runs_the_ray_this_machine_runs(config: dict[str, Any]) -> None:
    pins = re.findall(r"ray\[default\]==([0-9.]+)", _commands(config, "setup_commands"))
    assert pins == [ray.__version__]


def test_head_and_workers_install_specsweep_from_one_source(config: dict[str, Any]) -> None:
    head = re.findall(r'"specsweep @ ([^"]+)"', _commands(config, "head_setup_commands"))
    workers = re.findall(r'"specsweep\[gpu\] @ ([^"]+)"', _commands(config, "worker_setup_commands"))
    assert head and workers
    assert set(head) == set(workers)


def _on_prem_variant(text: str, config: dict[str, Any]) -> dict[str, Any]:
    """Apply the file's own on-prem instructions: its commented provider/auth, no node types."""
    block = text.split("# --- on-prem variant ---", 1)[1].split("# --- end of on-prem variant ---", 1)[0]
    lines = [ln[2:] for ln in block.splitlines() if ln.startswith("#   ") or re.match(r"# \w+:", ln)]
    replacement = yaml.safe_load("\n".join(lines))
    assert set(replacement) == {"provider", "auth"}
    variant = copy.deepcopy(config)
    variant.update(replacement)
    for key in ("available_node_types", "head_node_type"):
        variant.pop(key)
    return variant


def test_on_prem_variant_is_a_valid_local_cluster(text: str, config: dict[str, Any]) -> None:
    variant = _on_prem_variant(text, config)
    assert variant["provider"]["type"] == "local"
    prepared = prepare_config(variant)
    validate_config(prepared)
    node_type = prepared["available_node_types"][prepared["head_node_type"]]
    assert node_type["max_workers"] == len(variant["provider"]["worker_ips"])


def test_the_metrics_port_is_not_one_the_printed_dashboards_take(config: dict[str, Any]) -> None:
    """Ray's metrics were exported on 8080, the port `optuna-dashboard` (as the sweep prints it, and
    `make optuna-dashboard`) binds by default: on the head node it failed with "Address already in use"."""
    taken = {8080: "optuna-dashboard", 5000: "mlflow ui", 8265: "Ray's dashboard", 6379: "Ray's GCS"}
    makefile = (CLUSTER_FILE.parent / "Makefile").read_text()
    assert "--port $(or $(PORT),8080)" in makefile and "--port $(or $(PORT),5000)" in makefile
    for key in ("head_start_ray_commands", "worker_start_ray_commands"):
        ports = [int(p) for p in re.findall(r"--metrics-export-port=(\d+)", _commands(config, key))]
        assert ports, key
        assert not [taken[p] for p in ports if p in taken], (key, ports)
