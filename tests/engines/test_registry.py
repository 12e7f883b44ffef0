"""The engine registry: SGLang is there without anyone registering it, an unknown name says which exist."""

from __future__ import annotations

import pytest

from orchestrator.engines import engine_for
from orchestrator.engines.engine import Engine
from orchestrator.spec.engine_catalog import EngineName, names, owned_flags
from orchestrator.spec.sweep_spec import OWNED_FLAGS


def test_sglang_is_registered_on_first_use_and_owns_the_specs_flags() -> None:
    engine: Engine = engine_for(EngineName.SGLANG)
    assert engine.name == EngineName.SGLANG
    assert engine.owned_flags == owned_flags(EngineName.SGLANG) == OWNED_FLAGS
    assert EngineName.SGLANG in names()


def test_an_unknown_engine_names_the_known_ones() -> None:
    with pytest.raises(KeyError, match=r"no engine 'vllm' registered; known: .*sglang"):
        engine_for("vllm")


def test_the_endpoints_join_the_server_url_once() -> None:
    endpoints = engine_for(EngineName.SGLANG).api.endpoints
    assert endpoints.url("http://h:1/", endpoints.generate) == "http://h:1" + endpoints.generate
    assert all(
        path.startswith("/") for path in (endpoints.health, endpoints.flush_cache, *endpoints.server_info)
    )
