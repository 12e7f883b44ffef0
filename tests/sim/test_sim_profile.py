"""Profiles are data: every built-in one loads, documents its fields, and can be derived from."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from orchestrator.sim.profile import SimProfile, builtin_profiles, load_profile


def test_builtin_profiles_load() -> None:
    names = builtin_profiles()
    assert {"kimi-k25-rtxpro6000", "h200-tiny", "h200-llama8b", "tight"} <= set(names)
    for name in names:
        p = load_profile(name)
        assert p.name == name
        assert p.startup_time_scale > 0 and p.weight_load_s >= 0


def test_every_field_says_what_it_is() -> None:
    undocumented = [n for n, f in SimProfile.model_fields.items() if not f.description]
    assert undocumented == []


def test_profiles_derive_from_a_base_and_round_trip_through_json(tmp_path: Path) -> None:
    broken = load_profile({"base": "h200-tiny", "accept_p0": 0.9, "name": "tiny-good"})
    assert broken.accept_p0 == 0.9 and broken.gpu_total_mib == 143771
    path = tmp_path / "p.json"
    path.write_text(json.dumps(broken.model_dump()))
    assert load_profile(path) == broken
    assert load_profile(str(path)) == broken


def test_bad_profiles_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValidationError):
        load_profile({"base": "h200-tiny", "no_such_field": 1})
    with pytest.raises(FileNotFoundError):
        load_profile("no-such-profile")
