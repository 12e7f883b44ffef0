"""The simulated server's HTTP API, shaped like SGLang 0.5.17's answers (see the real ``/generate`` and
``/get_server_info`` bodies): ``/health``, ``/generate`` (plain and SSE streaming with cumulative
``output_ids``), ``/get_server_info``, ``/get_model_info``, ``/flush_cache`` and ``/metrics``."""

from __future__ import annotations

import asyncio
import json
import time
from http import HTTPStatus
from typing import Any, Protocol

from aiohttp import web

from orchestrator.sim.args import SimArgs
from orchestrator.sim.logtext import SglangLog
from orchestrator.sim.memory import StartupPlan
from orchestrator.sim.profile import SimProfile
from orchestrator.sim.prompts import PromptKind, greedy_stream, prompt_key, prompt_kind, top_two
from orchestrator.sim.request_state import SimRequest
from orchestrator.sim.scheduler import Scheduler
from orchestrator.sim.server_args_text import server_args_items
from orchestrator.sim.speed import SpeedModel
from orchestrator.sim.startup_figures import graph_usage, kv_target_gib, startup_times

HEALTH_TIMEOUT_S = 20.0
DEPRECATED = (
    "Endpoint '{old}' is deprecated and will be removed in a future version. Please use '{new}' instead."
)


class SimServer(Protocol):
    """What the API reads of the server process (`sim.server.SimServer`); a protocol, so that the process
    imports the API and not the other way round."""

    args: SimArgs
    profile: SimProfile
    plan: StartupPlan
    speed: SpeedModel
    log: SglangLog
    scheduler: Scheduler | None
    probs_by_kind: dict[PromptKind, list[float]]
    ready: bool
    draining: bool
    open_streams: set[asyncio.BaseTransport]  # cut when the server dies serving


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": {"message": message}}, status=status)


def access_line(request: web.Request, status: int) -> str:
    peer = request.transport.get_extra_info("peername") if request.transport else None
    client = f"{peer[0]}:{peer[1]}" if peer else "127.0.0.1:0"
    phrase = HTTPStatus(status).phrase
    return f'INFO:     {client} - "{request.method} {request.path} HTTP/1.1" {status} {phrase}'


def meta_info(server: SimServer, req: SimRequest, *, final: bool) -> dict[str, Any]:
    """``meta_info`` in 0.5.17's key order; the speculative counts only on the final chunk."""
    finish: dict[str, Any] | None = None
    if req.aborted:
        finish = {"type": "abort", "message": "Abort in waiting queue" if not req.output_ids else "Abort"}
    elif req.finished:
        finish = {"type": "length", "length": req.max_new_tokens}
    meta: dict[str, Any] = {
        "id": req.rid,
        "finish_reason": finish,
        "prompt_tokens": req.input_len,
        "weight_version": "default",
        "num_retractions": req.num_retractions,
        "reasoning_tokens": 0,
        "completion_tokens": len(req.output_ids),
        "cached_tokens": 0,
        "cached_tokens_details": None,
        "dp_rank": None,
    }
    if final:
        meta["e2e_latency"] = time.monotonic() - req.created
        tree = server.speed.tree
        if tree is not None:
            proposed = req.verify_ct * max(0, tree.draft_tokens - 1)
            meta.update(
                spec_accept_rate=req.accepted_drafts / proposed if proposed else 0.0,
                spec_accept_length=len(req.output_ids) / max(1, req.verify_ct),
                spec_num_correct_drafts=req.accepted_drafts,
                spec_num_proposed_drafts=proposed,
                spec_verify_ct=req.verify_ct,
                spec_accepted_drafts=req.accepted_drafts,
                spec_proposed_drafts=proposed,
                spec_correct_drafts_histogram=list(req.histogram),
                spec_accept_histogram=list(req.histogram),
            )
    meta["response_sent_to_client_ts"] = time.time()
    return meta


def body(server: SimServer, req: SimRequest, *, final: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if not server.args.skip_tokenizer_init:
        out["text"] = "".join(f" t{i}" for i in req.output_ids)
    out["output_ids"] = list(req.output_ids)
    out["meta_info"] = meta_info(server, req, final=final)
    return out


def parse_generate(server: SimServer, data: Any) -> tuple[int, int]:
    """Prompt length and new-token budget of a ``/generate`` body; ValueError in SGLang's words."""
    if not isinstance(data, dict):
        raise ValueError("The request body must be a JSON object.")
    ids, text = data.get("input_ids"), data.get("text")
    if ids is not None:
        if not isinstance(ids, list) or any(not isinstance(i, int) for i in ids):
            raise ValueError("input_ids must be a flat list of token ids (batches are not supported).")
        prompt_len = len(ids)
    elif text is not None:
        if server.args.skip_tokenizer_init:
            raise ValueError("The tokenizer is not initialized (--skip-tokenizer-init): send input_ids.")
        prompt_len = len(str(text).split())  # about one token a word
    else:
        raise ValueError("Either text or input_ids should be provided.")
    if prompt_len == 0:
        raise ValueError("The input is empty.")
    params = data.get("sampling_params") or {}
    max_new = int(params.get("max_new_tokens", 128))
    if max_new < 0:
        raise ValueError("max_new_tokens must be at least 0.")
    context_len = server.args.context_length or server.profile.context_len
    if prompt_len >= context_len:
        raise ValueError(
            f"The input ({prompt_len} tokens) is longer than the model's context length "
            f"({context_len} tokens)."
        )
    return prompt_len, min(max_new, context_len - prompt_len)


def _json_args(server: SimServer) -> dict[str, Any]:
    items = dict(server_args_items(server.args, server.profile))
    cfg = items["cuda_graph_config"]
    for phase in cfg.values():
        phase.update(tc_compiler="eager", full_prefill_max_req=None, full_prefill_prefix_chunk_tokens=None)
    return items


def server_info(server: SimServer) -> dict[str, Any]:
    plan = server.plan
    args = _json_args(server)
    internal: dict[str, Any] = dict(args)
    internal.update(
        last_gen_throughput=server.scheduler.stats.last_gen_throughput if server.scheduler else 0.0,
        memory_usage={
            "weight": round(server.profile.target_weights_gib / server.args.tp_size, 3),
            "kvcache": round(kv_target_gib(plan), 3),
            "startup_available": round(plan.final_avail, 3),
            "token_capacity": plan.kv_tokens,
            "token_capacity_swa": None,
            "graph": {k: round(v, 3) for k, v in graph_usage(plan, server.speed.tree is not None).items()},
        },
        startup_time=startup_times(plan, server.profile, server.speed.tree is not None),
        effective_max_running_requests_per_dp=plan.max_running_requests,
    )
    if server.speed.tree is not None and server.scheduler is not None:
        internal["avg_spec_accept_length"] = server.scheduler.stats.avg_accept_length
    context_len = server.args.context_length or server.profile.context_len
    return {
        **args,
        "status": "ready" if server.ready else "starting",
        "max_total_num_tokens": plan.kv_tokens,
        "max_req_input_len": context_len - 6,
        "startup_time": startup_times(plan, server.profile, server.speed.tree is not None),
        "internal_states": [internal],
        "version": server.profile.sglang_version,
        "kv_events": None,
    }


def model_info(server: SimServer) -> dict[str, Any]:
    return {
        "model_path": server.args.model_path,
        "tokenizer_path": server.args.tokenizer_path,
        "is_generation": True,
        "preferred_sampling_params": None,
        "weight_version": "default",
        "has_image_understanding": False,
        "has_audio_understanding": False,
        "model_type": server.profile.target_arch,
        "architectures": [server.profile.target_arch],
    }


def metrics_text(server: SimServer) -> str:
    sched = server.scheduler
    stats = sched.stats if sched else None
    label = f'{{model_name="{server.args.served_model_name}",engine_type="unified",tp_rank="0",pp_rank="0"}}'
    gauges: list[tuple[str, str, float]] = [
        ("num_running_reqs", "The number of running requests.", len(sched.running) if sched else 0),
        ("num_queue_reqs", "The number of waiting requests.", len(sched.waiting) if sched else 0),
        ("token_usage", "The token usage.", sched.used / sched.pool if sched else 0.0),
        ("gen_throughput", "The generation throughput (token/s).", stats.last_gen_throughput if stats else 0),
        ("spec_accept_length", "The average acceptance length of speculative decoding.",
         sched.stats.last_accept_len if sched and server.speed.tree else 0.0),
        ("spec_accept_rate", "The average acceptance rate of speculative decoding.",
         sched.stats.last_accept_rate if sched and server.speed.tree else 0.0),
        ("max_total_num_tokens", "Maximum total number of tokens in the KV cache pool.",
         server.plan.kv_tokens),
    ]  # fmt: skip
    counters: list[tuple[str, str, float]] = [
        ("prompt_tokens_total", "Number of prefill tokens processed.", stats.prompt_tokens if stats else 0),
        ("generation_tokens_total", "Number of generation tokens processed.",
         sched.stats.generation_tokens if sched else 0),
        ("num_requests_total", "Number of requests processed.", sched.stats.requests if sched else 0),
    ]  # fmt: skip
    lines = []
    for kind, rows in (("gauge", gauges), ("counter", counters)):
        for name, help_text, value in rows:
            lines += [f"# HELP sglang:{name} {help_text}", f"# TYPE sglang:{name} {kind}"]
            lines.append(f"sglang:{name}{label} {float(value)}")
    return "\n".join(lines) + "\n"


def make_app(server: SimServer) -> web.Application:
    log = server.log

    def logged(resp: web.StreamResponse, request: web.Request) -> web.StreamResponse:
        log.line(access_line(request, resp.status))
        return resp

    async def health(request: web.Request) -> web.StreamResponse:
        if not server.ready or server.draining or server.scheduler is None:
            return logged(web.Response(status=503), request)
        req = server.scheduler.submit(1, 1)
        try:
            await asyncio.wait_for(req.done.wait(), HEALTH_TIMEOUT_S)
        except TimeoutError:
            server.scheduler.abort(req)
            return logged(web.Response(status=503), request)
        return logged(web.Response(status=200), request)

    async def generate(request: web.Request) -> web.StreamResponse:
        if server.scheduler is None or server.draining:
            return logged(
                _error(503, "The server is shutting down." if server.draining else "Not ready."), request
            )
        try:
            data = await request.json()
            prompt_len, max_new = parse_generate(server, data)
        except (ValueError, TypeError) as err:
            return logged(_error(400, str(err)), request)
        ids = data.get("input_ids")
        if isinstance(ids, list):
            kind = prompt_kind(ids)
            req = server.scheduler.submit(
                prompt_len,
                max_new,
                probs=server.probs_by_kind[kind],
                greedy=greedy_stream(ids),
                tie_key=prompt_key(ids),
            )
        else:
            req = server.scheduler.submit(prompt_len, max_new)
        if not data.get("stream"):
            await req.done.wait()
            answer = body(server, req, final=True)
            if data.get("return_logprob") and int(data.get("top_logprobs_num") or 0) >= 2:
                key = prompt_key(ids) if isinstance(ids, list) else 0
                answer["meta_info"]["output_top_logprobs"] = top_two(key, req.output_ids, req.vocab)
            return logged(web.json_response(answer), request)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        log.line(access_line(request, 200))
        sent = 0
        if request.transport is not None:
            server.open_streams.add(request.transport)
        try:
            while True:
                await req.changed.wait()
                req.changed.clear()
                done = req.finished
                if len(req.output_ids) > sent or done:
                    sent = len(req.output_ids)
                    chunk = json.dumps(body(server, req, final=done))
                    await resp.write(f"data: {chunk}\n\n".encode())
                if done:
                    break
            await resp.write(b"data: [DONE]\n\n")
            await resp.write_eof()
        except ConnectionError:  # the client went away: SGLang aborts the request
            server.scheduler.abort(req)
        except asyncio.CancelledError:
            server.scheduler.abort(req)
            raise
        finally:
            if request.transport is not None:
                server.open_streams.discard(request.transport)
        return resp

    def deprecated(old: str, new: str) -> None:
        log.line(DEPRECATED.format(old=old, new=new))

    async def get_server_info(request: web.Request) -> web.StreamResponse:
        if request.path == "/get_server_info":
            deprecated("/get_server_info", "/server_info")
        return logged(web.json_response(server_info(server)), request)

    async def get_model_info(request: web.Request) -> web.StreamResponse:
        if request.path == "/get_model_info":
            deprecated("/get_model_info", "/model_info")
        return logged(web.json_response(model_info(server)), request)

    async def flush_cache(request: web.Request) -> web.StreamResponse:
        ok = server.scheduler is not None and server.scheduler.flush()
        if ok:
            log.line("Cache flushed successfully!", rank=True)
        text = (
            "Cache flushed.\nPlease check backend logs for more details. (When there are running or waiting "
            "requests, the operation will not be performed.)\n"
        )
        return logged(web.Response(text=text, status=200 if ok else 400), request)

    async def metrics(request: web.Request) -> web.StreamResponse:
        if not server.args.enable_metrics:
            return logged(web.Response(status=404, text="Not Found"), request)
        return logged(web.Response(text=metrics_text(server), content_type="text/plain"), request)

    @web.middleware
    async def api_key(request: web.Request, handler: Any) -> web.StreamResponse:
        # As SGLang's add_api_key_middleware: /health* and /metrics stay open, the rest wants the key.
        key = server.args.api_key
        open_path = request.path.startswith(("/health", "/metrics")) or request.method == "OPTIONS"
        if key and not open_path and request.headers.get("Authorization") != f"Bearer {key}":
            return logged(web.json_response({"error": "Unauthorized"}, status=401), request)
        resp: web.StreamResponse = await handler(request)
        return resp

    app = web.Application(middlewares=[api_key])
    app.router.add_get("/health", health)
    app.router.add_get("/health_generate", health)
    app.router.add_post("/generate", generate)
    for path in ("/get_server_info", "/server_info"):
        app.router.add_get(path, get_server_info)
    for path in ("/get_model_info", "/model_info"):
        app.router.add_get(path, get_model_info)
    app.router.add_route("*", "/flush_cache", flush_cache)
    app.router.add_get("/metrics", metrics)
    return app
