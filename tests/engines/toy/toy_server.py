"""The toy engine's server: its own paths, its own request and answer bodies, its own log lines.

Nothing here is SGLang's: a request is ``{"prompt": [ids], "max_tokens": n, "stream": bool}``, a streamed
answer is one JSON object a line (``{"produced": n, "new": [ids]}``, the last with ``"stop"``), and the
log says what the toy does in its own words. Only aiohttp: it runs with the toy folder alone on its path.

``--toy-fail kv-oom`` runs out of memory allocating its KV pool, ``--toy-fail crash`` crashes loading its
weights: the failures a contract test reads off its log.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import signal
import sys

from aiohttp import web

ACCEPT_LENGTH = 1.5
VERSION = "1.2"
FREE_GIB = 80.0
WEIGHTS_GIB = 0.5
KV_TOKENS_PER_GIB = 16384
TICK_S = 0.001  # between two decode steps (--toy-tick-ms)


def say(text: str) -> None:
    print(f"toy-server: {text}", flush=True)


def _ids(prompt: list[int], wanted: int) -> list[int]:
    return [(len(prompt) + i) % 97 for i in range(wanted)]


async def generate(request: web.Request) -> web.StreamResponse:
    body = await request.json()
    say(f"{request.method} {request.path}")
    prompt = [int(i) for i in body.get("prompt") or []]
    wanted = int(body.get("max_tokens", 1))
    ids = _ids(prompt, wanted)
    if not body.get("stream"):
        return web.json_response({"tokens": ids, "stop": "length"})
    resp = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
    await resp.prepare(request)
    produced, steps = 0, 0
    while produced < wanted:
        await asyncio.sleep(TICK_S)
        step = min(2 if steps % 2 else 1, wanted - produced)  # one token, then two: a speculative step
        line: dict[str, object] = {"produced": produced + step, "new": ids[produced : produced + step]}
        produced, steps = produced + step, steps + 1
        if produced == wanted:
            line.update(stop="length", prompt=len(prompt), steps=steps)
        await resp.write((json.dumps(line) + "\n").encode())
    return resp


async def plain(request: web.Request) -> web.Response:
    say(f"{request.method} {request.path}")
    if request.path == "/toy/info":
        return web.json_response({"version": VERSION, "speculation": {"accepted_per_step": ACCEPT_LENGTH}})
    if request.path == "/toy/flush":
        return web.json_response({"flushed": True})
    return web.json_response({"ok": True})


async def main() -> int:
    p = argparse.ArgumentParser(prog="toy_server")
    for flag in ("--toy-model", "--toy-greeting"):
        p.add_argument(flag)
    p.add_argument("--toy-gpus", type=int, default=1)
    p.add_argument("--toy-batch", type=int, default=16)
    p.add_argument("--toy-fraction", type=float, default=0.8)
    p.add_argument("--toy-tick-ms", type=float, default=1.0)
    p.add_argument("--toy-fail", choices=("kv-oom", "crash"), default=None)
    p.add_argument("--toy-host", required=True)
    p.add_argument("--toy-port", type=int, required=True)
    args = p.parse_args()
    global TICK_S
    TICK_S = math.floor(args.toy_tick_ms) / 1000  # whole milliseconds: the toy's rule (TOY_SPACE)
    say(f"{VERSION} starting: model {args.toy_model} on {args.toy_gpus} gpu(s)")
    if args.toy_fail == "crash":
        say("error: crashed reading the weights: the file ends early")
        return 1
    say(f"weights loaded: {WEIGHTS_GIB:.2f} GiB, {FREE_GIB - WEIGHTS_GIB:.2f} GiB free")
    pool_gib = FREE_GIB * args.toy_fraction - WEIGHTS_GIB
    if args.toy_fail == "kv-oom":
        say(f"error: out of memory: the kv pool needs {pool_gib:.2f} GiB, 0.00 GiB free")
        return 1
    say(f"kv pool: {int(pool_gib * KV_TOKENS_PER_GIB)} tokens in {pool_gib:.2f} GiB")
    say(f"settled: fraction {args.toy_fraction:g}, batch {args.toy_batch}, gpus {args.toy_gpus}")
    app = web.Application()
    app.router.add_post("/toy/generate", generate)
    app.router.add_get("/toy/health", plain)
    app.router.add_post("/toy/flush", plain)
    app.router.add_get("/toy/info", plain)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    await web.TCPSite(runner, args.toy_host, args.toy_port).start()
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGINT, stop.set)
    say(f"serving on http://{args.toy_host}:{args.toy_port} (model {args.toy_model})")
    await stop.wait()
    say("stopping")
    await runner.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
