"""SGLang's cache flush between benchmark stages: it answers 400 while requests are still pending."""

from __future__ import annotations

import asyncio
import logging

import aiohttp

from orchestrator.engines.api import Endpoints, describe_error
from orchestrator.engines.sglang.wire import SGLANG_ENDPOINTS

log = logging.getLogger(__name__)
_CONTROL_TIMEOUT = aiohttp.ClientTimeout(total=30)


async def flush_cache(
    base_url: str,
    session: aiohttp.ClientSession,
    *,
    endpoints: Endpoints = SGLANG_ENDPOINTS,
    attempts: int = 20,
    delay_s: float = 0.5,
) -> bool:
    """POST /flush_cache. SGLang answers 400 while requests are still pending, so retry briefly."""
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
