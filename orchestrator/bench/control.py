"""The server's control endpoints the benchmark uses around its stages: health and server info.

A server answers 503 while it starts, and an engine may have renamed its info endpoint (SGLang did in
0.5.9: `Endpoints.server_info` lists the names); these calls wait through the expected answers and say
when the server is not there. The cache flush between stages is the engine's own
(`engines.engine.Engine.flush_cache`).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import aiohttp

from orchestrator.engines.api import Endpoints, ServerApi

log = logging.getLogger(__name__)
_CONTROL_TIMEOUT = aiohttp.ClientTimeout(total=30)


async def server_info(
    base_url: str, session: aiohttp.ClientSession, *, endpoints: Endpoints
) -> dict[str, Any] | None:
    """GET the engine's server info, from the first of its paths that answers."""
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
    base_url: str, session: aiohttp.ClientSession, *, api: ServerApi
) -> float | None:
    """The server's own average accept length since the last cache flush (warm-up included), as the
    engine reads it off its server info; None without speculation or when unreadable."""
    info = await server_info(base_url, session, endpoints=api.endpoints)
    return api.accept_length(info) if info else None


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
