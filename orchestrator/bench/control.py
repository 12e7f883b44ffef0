"""The server's control endpoints the benchmark uses between stages: health, cache flush, server info.

SGLang answers each of them in its own way (400 while requests are pending, 503 while starting, a
renamed info endpoint from 0.5.9 on); these calls wait through the expected answers and say when the
server is not there.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import aiohttp

from orchestrator.bench.client import describe_error
from orchestrator.engines.engine import Endpoints

log = logging.getLogger(__name__)
_CONTROL_TIMEOUT = aiohttp.ClientTimeout(total=30)


async def flush_cache(
    base_url: str,
    session: aiohttp.ClientSession,
    *,
    endpoints: Endpoints,
    attempts: int = 20,
    delay_s: float = 0.5,
) -> bool:
    """POST the engine's flush_cache. SGLang answers 400 while requests are still pending, so retry
    briefly."""
    url = endpoints.url(base_url, endpoints.flush_cache)
    for _ in range(attempts):
        try:
            async with session.post(url, timeout=_CONTROL_TIMEOUT) as resp:
                if resp.status == 200:
                    return True
                if resp.status != 400:
                    log.warning("/flush_cache answered %d", resp.status)
                    return False
        except (aiohttp.ClientError, TimeoutError) as exc:
            log.warning("/flush_cache failed: %s", describe_error(exc, _CONTROL_TIMEOUT))
            return False
        await asyncio.sleep(delay_s)
    log.warning("/flush_cache still refused (requests pending) after %d attempts", attempts)
    return False


async def server_info(
    base_url: str, session: aiohttp.ClientSession, *, endpoints: Endpoints
) -> dict[str, Any] | None:
    """GET the engine's server info, from the first of its paths that answers (SGLang: /server_info, or
    /get_server_info for servers before 0.5.9)."""
    for path in endpoints.server_info:
        try:
            async with session.get(endpoints.url(base_url, path), timeout=_CONTROL_TIMEOUT) as resp:
                if resp.status != 200:
                    continue
                data = await resp.json(content_type=None)
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            log.debug("%s failed: %s", path, exc)
            continue
        if isinstance(data, dict):
            return data
    return None


async def server_accept_length(
    base_url: str, session: aiohttp.ClientSession, *, endpoints: Endpoints
) -> float | None:
    """The server's own average accept length since the last /flush_cache (warm-up included),
    ``internal_states[0].avg_spec_accept_length``; None without speculation or when unreadable."""
    info = await server_info(base_url, session, endpoints=endpoints)
    states = info.get("internal_states") if info else None
    if not isinstance(states, list) or not states or not isinstance(states[0], dict):
        return None
    value = states[0].get("avg_spec_accept_length")
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return None


async def wait_healthy(
    base_url: str,
    session: aiohttp.ClientSession,
    timeout_s: float,
    *,
    endpoints: Endpoints,
    poll_s: float = 1.0,
) -> bool:
    """Poll GET health until it answers 200 (503 while the server starts); False after ``timeout_s``."""
    url = endpoints.url(base_url, endpoints.health)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while (remaining := deadline - loop.time()) > 0:
        try:
            # /health runs a one-token generate inside the server, so give each probe some time.
            probe = aiohttp.ClientTimeout(total=min(remaining, 30.0))
            async with session.get(url, timeout=probe) as resp:
                if resp.status == 200:
                    return True
        except (aiohttp.ClientError, TimeoutError):
            pass  # not listening yet
        await asyncio.sleep(max(0.0, min(poll_s, deadline - loop.time())))
    return False
