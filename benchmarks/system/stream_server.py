"""A `/generate` server that streams as fast as it can: `python -m benchmarks.system.stream_server --port P`.

It answers like SGLang 0.5.17 with `stream: true` (compact JSON, as orjson writes it; one SSE chunk per
token, each with the *cumulative* `output_ids` and its own `meta_info`, the final one with the speculative
counts, then `[DONE]`), but does no work: every chunk is rendered once and then only written, so the client
under test, not the server, sets the pace. It pins itself to the last CPU, leaving the others to the client.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
from collections.abc import Sequence

from aiohttp import web

VOCAB = 32000


def render_chunks(output_len: int, prompt_tokens: int, seed: int = 0) -> list[bytes]:
    """Every chunk of one answer, as bytes on the wire (the same for every request of that shape)."""
    rng = random.Random(seed)
    ids = [rng.randrange(VOCAB) for _ in range(output_len)]
    chunks = []
    for k in range(1, output_len + 1):
        meta: dict[str, object] = {
            "id": "47c95382b3724cc69ccdbc99eddd674d",
            "finish_reason": None,
            "prompt_tokens": prompt_tokens,
            "weight_version": "default",
            "num_retractions": 0,
            "reasoning_tokens": 0,
            "completion_tokens": k,
            "cached_tokens": 0,
            "cached_tokens_details": None,
            "dp_rank": None,
        }
        if k == output_len:
            meta["finish_reason"] = {"type": "length", "length": output_len}
            meta.update(
                e2e_latency=0.5,
                spec_accept_rate=0.0,
                spec_accept_length=output_len / max(1, output_len - 1),
                spec_verify_ct=max(1, output_len - 1),
                spec_accept_histogram=[max(1, output_len - 1)],
            )
        meta["response_sent_to_client_ts"] = 1795952264.3971791
        body = json.dumps({"output_ids": ids[:k], "meta_info": meta}, separators=(",", ":"))
        chunks.append(f"data: {body}\n\n".encode())
    chunks.append(b"data: [DONE]\n\n")
    return chunks


def make_app() -> web.Application:
    cache: dict[tuple[int, int], list[bytes]] = {}

    async def generate(request: web.Request) -> web.StreamResponse:
        data = await request.json()
        n = int(data.get("sampling_params", {}).get("max_new_tokens", 128))
        prompt = len(data.get("input_ids") or [])
        chunks = cache.get((n, prompt))
        if chunks is None:
            chunks = cache[(n, prompt)] = render_chunks(n, prompt)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for chunk in chunks:
            await resp.write(chunk)
        await resp.write_eof()
        return resp

    async def health(request: web.Request) -> web.Response:
        return web.Response(text="")

    app = web.Application()
    app.router.add_post("/generate", generate)
    app.router.add_get("/health", health)
    return app


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.system.stream_server")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    args = p.parse_args(argv)
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) > 1:
        os.sched_setaffinity(0, {cpus[-1]})
    web.run_app(make_app(), host=args.host, port=args.port, print=None, access_log=None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
