"""The spec's fixed flags are parsed once, at load, and read typed by everything that needs one."""

from __future__ import annotations

import pytest

from orchestrator.mlflow_schema.write import LaunchParams
from orchestrator.spec.fixed_flags import FixedFlag, parse_fixed
from orchestrator.spec.search import SpecError
from orchestrator.spec.sweep_spec import parse_spec
from tests.spec.test_spec import demo_data


def test_each_form_of_a_flag_reads_the_same() -> None:
    fixed = parse_fixed(["--trust-remote-code", "--page-size=16", "--kv-cache-dtype", "fp8_e4m3"])
    assert fixed.options == (
        FixedFlag("--trust-remote-code"),
        FixedFlag("--page-size", "16"),
        FixedFlag("--kv-cache-dtype", "fp8_e4m3"),
    )
    assert fixed.kv_cache_dtype == "fp8_e4m3" and fixed.prefill_graphs and fixed.chunked_prefill_size is None
    assert list(fixed) == ["--trust-remote-code", "--page-size=16", "--kv-cache-dtype", "fp8_e4m3"]


def test_the_typed_flags_the_driver_reads() -> None:
    assert parse_fixed(["--chunked-prefill-size", "4096"]).chunked_prefill_size == 4096
    assert parse_fixed(["--chunked-prefill-size=-1"]).chunked_prefill_size is None  # SGLang's "no chunking"
    assert not parse_fixed(["--cuda-graph-backend-prefill=disabled"]).prefill_graphs
    assert parse_fixed(["--api-key", "s3cret-key"]).api_key == "s3cret-key"


def test_the_server_section_holds_its_flags_parsed() -> None:
    data = demo_data()
    data["server"]["flags"] = [*data["server"]["flags"], "--chunked-prefill-size", "2048"]
    spec = parse_spec(data)
    assert spec.server.fixed.chunked_prefill_size == 2048
    assert spec.server.fixed.argv == tuple(spec.server.flags)


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        (["triton", "--attention-backend"], "'triton' follows no flag"),
        (["--chunked-prefill-size", "big"], "--chunked-prefill-size 'big' is not an integer"),
        (["--kv-cache-dtype"], "--kv-cache-dtype has no value"),
    ],
)
def test_flags_that_cannot_be_read_are_refused_naming_the_field(flags: list[str], words: str) -> None:
    data = demo_data()
    data["server"]["flags"] = flags
    with pytest.raises(SpecError) as err:
        parse_spec(data)
    assert "server.flags" in str(err.value) and words in str(err.value)


def test_mlflow_names_each_fixed_flag_from_the_parse_secrets_masked() -> None:
    data = demo_data()
    data["server"]["flags"] = ["--page-size=16", "--api-key", "s3cret-key", "--sim-startup-time-scale", "0"]
    params = dict(LaunchParams.from_spec(parse_spec(data)).fixed)
    assert params == {"page_size": "16", "api_key": "****"}
