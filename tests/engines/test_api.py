"""The engine-neutral request seam: how a failed request is described."""

from __future__ import annotations

import aiohttp

from orchestrator.engines.api import describe_error


def test_a_silent_stream_names_its_read_timeout() -> None:
    timeout = aiohttp.ClientTimeout(total=None, sock_read=120)
    assert describe_error(TimeoutError(), timeout) == "no data from the server for 120 s"


def test_a_control_call_with_only_a_total_timeout_names_that() -> None:
    # The cache flush sets total=30 and no read timeout: formatting None would raise instead.
    timeout = aiohttp.ClientTimeout(total=30)
    assert describe_error(TimeoutError(), timeout) == "no data from the server for 30 s"


def test_other_errors_keep_their_type_and_text() -> None:
    timeout = aiohttp.ClientTimeout(total=30)
    refused = aiohttp.ClientConnectionError("refused")
    assert describe_error(refused, timeout) == "ClientConnectionError: refused"
    assert describe_error(ConnectionResetError(), timeout) == "ConnectionResetError"
