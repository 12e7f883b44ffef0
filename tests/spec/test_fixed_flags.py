"""The spec's fixed flags are parsed once, at load, and read typed by everything that needs one."""

from __future__ import annotations

import pytest

from orchestrator.mlflow_schema.write import LaunchParams
from orchestrator.spec.engine_catalog import reading
from orchestrator.spec.engine_space import FlagReading
from orchestrator.spec.fixed_flags import FixedFlag, ServerFacts, parse_fixed, read_facts
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
    facts = read_facts(fixed, reading("sglang"))
    assert facts.kv_cache_dtype == "fp8_e4m3" and facts.prefill_graphs and facts.chunked_prefill_size is None
    assert list(fixed) == ["--trust-remote-code", "--page-size=16", "--kv-cache-dtype", "fp8_e4m3"]


def _sglang(flags: list[str]) -> ServerFacts:
    return read_facts(parse_fixed(flags), reading("sglang"))


def test_the_typed_flags_the_driver_reads() -> None:
    assert _sglang(["--chunked-prefill-size", "4096"]).chunked_prefill_size == 4096
    assert _sglang(["--chunked-prefill-size=-1"]).chunked_prefill_size is None  # SGLang's "no chunking"
    assert not _sglang(["--cuda-graph-backend-prefill=disabled"]).prefill_graphs
    assert not _sglang(["--disable-cuda-graph"]).prefill_graphs
    assert _sglang(["--api-key", "s3cret-key"]).api_key == "s3cret-key"


def test_the_typed_reading_is_the_engines_own() -> None:
    """An engine names the flags that carry these facts in its own spelling: another engine's flags of
    the same meaning are not read (they are only passed through), and an engine that declares none has
    the defaults."""
    toy = FlagReading(
        chunked_prefill_size="--toy-chunk", kv_cache_dtype="--toy-kv", api_key="--toy-key",
        prefill_graphs_off=(("--toy-graphs", "off"),),
    )  # fmt: skip
    fixed = parse_fixed(["--toy-chunk", "512", "--toy-graphs", "off", "--chunked-prefill-size", "big"])
    assert read_facts(fixed, toy) == ServerFacts(chunked_prefill_size=512, prefill_graphs=False)
    assert read_facts(fixed, FlagReading()) == ServerFacts()
    with pytest.raises(ValueError, match="--chunked-prefill-size 'big' is not an integer"):
        read_facts(fixed, reading("sglang"))


def test_the_server_section_holds_its_flags_parsed() -> None:
    data = demo_data()
    data["server"]["flags"] = [*data["server"]["flags"], "--chunked-prefill-size", "2048"]
    spec = parse_spec(data)
    assert spec.server_facts.chunked_prefill_size == 2048
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
