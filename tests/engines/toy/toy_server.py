"""The toy engine's server: answers the toy's own paths with SGLang-shaped bodies (the benchmark client
reads those), and logs every request it serves. Only aiohttp: it runs with the toy folder alone on its
path."""

from __future__ import annotations

import argparse
import asyncio
import json

from aiohttp import web

ACCEPT_LENGTH = 1.5


def say(text: str) -> None:
    print(f"toy-server: {text}", flush=True)


async def generate(request: web.Request) -> web.StreamResponse:
    body = await request.json()
    say(f"{request.method} {request.path}")
    prompt = list(body.get("input_ids") or [])
    wanted = int(body.get("sampling_params", {}).get("max_new_tokens", 1))
    ids = [(len(prompt) + i) % 97 for i in range(wanted)]

    def chunk(count: int) -> dict[str, object]:
        finish = {"type": "length", "length": wanted} if count == wanted else None
        meta = {"completion_tokens": count, "prompt_tokens": len(prompt), "finish_reason": finish}
        return {"output_ids": ids[:count], "meta_info": meta}

    if not body.get("stream"):
        return web.json_response(chunk(wanted))
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    for count in range(1, wanted + 1):
        await asyncio.sleep(0.001)
        await resp.write(f"data: {json.dumps(chunk(count))}\n\n".encode())
    await resp.write(b"data: [DONE]\n\n")
    return resp


async def plain(request: web.Request) -> web.Response:
    say(f"{request.method} {request.path}")
    if request.path == "/toy/info":
        return web.json_response({"internal_states": [{"avg_spec_accept_length": ACCEPT_LENGTH}]})
    return web.json_response({})


async def main() -> None:
    p = argparse.ArgumentParser(prog="toy_server")
    for flag in ("--toy-model", "--toy-gpus", "--toy-batch", "--toy-greeting"):
        p.add_argument(flag)
    p.add_argument("--toy-host", required=True)
    p.add_argument("--toy-port", type=int, required=True)
    args = p.parse_args()
    app = web.Application()
    app.router.add_post("/toy/generate", generate)
    app.router.add_get("/toy/health", plain)
    app.router.add_post("/toy/flush", plain)
    app.router.add_get("/toy/info", plain)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, args.toy_host, args.toy_port).start()
    say(f"serving on http://{args.toy_host}:{args.toy_port} (model {args.toy_model})")
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main())
