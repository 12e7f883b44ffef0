"""The simulated SGLang server process (`SimServer`):
``python -m orchestrator.sim.server <SGLang flags> --sim-profile P --sim-state-dir D``.

A separate process that an orchestrator starts, watches and stops exactly like
``python -m sglang.launch_server``: same flags, same start-up lines in the same order, the same
failures at the same stage (ending, like SGLang's launcher, in a SIGKILL of itself: return code -9),
the same HTTP API, and GPU memory reported through the fake NVML. Start-up is compressed in time
(``startup_time_scale``); serving is not, so measured throughput is real.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import os
import random
import signal
import sys
from collections.abc import Sequence

from aiohttp import web
from pydantic import ValidationError

from orchestrator.gpu import visible_indices
from orchestrator.sim import logtext
from orchestrator.sim.api import make_app
from orchestrator.sim.args import ArgsError, SimArgs, parse
from orchestrator.sim.memory import MemFailure, OomKind, plan_startup
from orchestrator.sim.nvml import GpuStateWriter
from orchestrator.sim.profile import SimProfile, load_profile
from orchestrator.sim.prompts import probs_by_kind
from orchestrator.sim.scheduler import Scheduler, ServingMemory
from orchestrator.sim.server_args_text import render_server_args, server_args_items
from orchestrator.sim.speed import SpeedModel, broken_draft_reason, position_probs
from orchestrator.sim.startup_figures import startup_times
from orchestrator.sim.startup_log import capture_begin, failure_traceback, log_step
from orchestrator.sim.tiers import TierController, load_tier_config

FIRED_UP = "The server is fired up and ready to roll!"


class SimServer:
    """One simulated SGLang server process: start-up, serving, and stopping."""

    def __init__(self, args: SimArgs, profile: SimProfile) -> None:
        self.args = args
        self.profile = profile
        self.log = logtext.SglangLog(args.tp_size)
        self.plan = plan_startup(profile, args)
        self.speed = SpeedModel.for_args(profile, args, self.plan.capture_sizes)
        self.broken_draft = broken_draft_reason(profile, args)
        tree = self.speed.tree
        self.probs = position_probs(profile, tree, broken=bool(self.broken_draft)) if tree else []
        self.probs_by_kind = probs_by_kind(profile, tree, broken=bool(self.broken_draft))
        self.scale = args.sim_startup_time_scale
        if self.scale is None:
            self.scale = profile.startup_time_scale
        # The same rule as the real probe's: CUDA_VISIBLE_DEVICES when set, else all of the node's GPUs.
        self.indices = visible_indices(profile.gpu_count)
        self.gpus = GpuStateWriter(args.sim_state_dir, self.indices[: args.tp_size])
        self.scheduler: Scheduler | None = None
        self.ready = False
        self.draining = False
        self.bound = False
        self.pid = os.getpid()
        self._runner: web.AppRunner | None = None
        self._stop_kind = ""
        self._stop = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self.open_streams: set[asyncio.BaseTransport] = set()  # streaming responses' connections

    # ---------------------------------------------------------------- the process's life -------
    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGINT, self._signal, "int")
        loop.add_signal_handler(signal.SIGTERM, self._signal, "term")
        startup = asyncio.create_task(self._startup())
        stopped = asyncio.create_task(self._stop.wait())
        await asyncio.wait({startup, stopped}, return_when=asyncio.FIRST_COMPLETED)
        if startup.done() and not startup.cancelled() and startup.exception() is not None:
            self.gpus.remove()
            raise startup.exception()  # type: ignore[misc]
        if not startup.done():
            startup.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await startup
        await stopped
        return await self._shutdown()

    def _signal(self, kind: str) -> None:
        if not self._stop_kind:
            self._stop_kind = kind
            self._stop.set()

    async def _wait(self, real_s: float) -> None:
        assert self.scale is not None
        await asyncio.sleep(real_s * self.scale)

    def _hold(self, step_count: int) -> None:
        self.gpus.update(self.plan.used_gib(step_count) * 1024)

    async def _startup(self) -> None:
        a, log = self.args, self.log
        for note in a.raw_notes:
            log.raw(note)
        for note in a.log_notes:
            log.line(note)
        log.line("server_args=" + render_server_args(server_args_items(a, self.profile)))
        await self._wait(self.profile.import_s)
        if len(self.indices) < a.tp_size or max(self.indices[: a.tp_size]) >= self.profile.gpu_count:
            self._die("RuntimeError: CUDA error: invalid device ordinal\n")
        self.gpus.update(self.profile.cuda_context_gib * 1024)
        for i, step in enumerate(self.plan.steps):
            await log_step(log, self.profile, a, self.plan, step, self._wait)
            self._hold(i + 1)
        if self.plan.failure is not None:
            await self._fail(self.plan.failure)
        await self._serve()

    async def _fail(self, f: MemFailure) -> None:
        if f.kind in (OomKind.CAPTURE, OomKind.RAW_OOM) and f.name:
            self.log.line(capture_begin(self.args, self.plan, f.name, f.start_avail_gib), rank=True)
            await self._wait(self.profile.graph_capture_s_per_bs)
        self._die(failure_traceback(self.args, self.profile, self.plan, f))

    def _die(self, traceback: str) -> None:
        """SGLang's end after a scheduler error: the launcher kills its own tree, itself included."""
        self.log.line("Scheduler hit an exception: " + traceback, rank=True)
        self.log.line("Received sigquit from a child process. It usually means the child failed.")
        self.log.line(f"kill_process_tree called: parent_pid={self.pid}, include_parent=True, pid={self.pid}")
        self.gpus.remove()
        os.kill(self.pid, signal.SIGKILL)

    async def _serve(self) -> None:
        a, p, log = self.args, self.profile, self.log
        plan = self.plan
        context_len = a.context_length or p.context_len
        log.line(
            f"max_total_num_tokens={plan.kv_tokens}, chunked_prefill_size={a.chunked_prefill_size}, "
            f"max_prefill_tokens={a.max_prefill_tokens}, max_running_requests={plan.max_running_requests}, "
            f"context_len={context_len}, available_gpu_mem={plan.final_avail:.2f} GB",
            rank=True,
        )
        log.line(
            "Tree cache initialized: source=default impl=RadixCache hybrid_swa=False hybrid_ssm=False "
            "hierarchical=False streaming_wrapped=False",
            rank=True,
        )
        t = startup_times(self.plan, self.profile, self.speed.tree is not None)
        graphs = ", ".join(f"{k}={v:.2f}" for k, v in t["cuda_graph"].items())
        log.line(
            f"Engine startup timings (s): load_weight={t['load_weight']:.2f}, kv_cache_allocation="
            f"{t['kv_cache_allocation']:.2f}, scheduler_e2e={t['scheduler_e2e']:.2f}, "
            f"cuda_graph={{{graphs}}}, tokenizer_e2e={t['tokenizer_e2e']:.2f}"
        )
        tiers = None
        if a.speculative_adaptive and a.speculative_num_steps is not None:
            tiers = TierController(load_tier_config(a.speculative_adaptive_config), a.speculative_num_steps)
            steps, candidates = a.speculative_num_steps, tiers.candidate_steps
            log.line(f"AdaptiveSpeculativeParams initialized: steps={steps}, candidate_steps={candidates}")
        self.scheduler = Scheduler(
            speed=self.speed, probs=self.probs, pool_tokens=max(1, plan.kv_tokens),
            max_running=plan.max_running_requests, chunked_prefill=a.chunked_prefill_size,
            decode_log_interval=a.decode_log_interval, vocab=p.vocab_size, seed=a.random_seed, log=log,
            lossy_rate=p.lossy_rate, near_tie_flips=p.near_tie_flips, tiers=tiers,
            serving=self._serving_memory(),
        )  # fmt: skip
        self._tasks.add(asyncio.create_task(self.scheduler.run()))
        await self._wait(p.server_start_s)
        log.line(f"INFO:     Started server process [{self.pid}]")
        log.line("INFO:     Waiting for application startup.")
        log.line("INFO:     Application startup complete.")
        self._runner = web.AppRunner(make_app(self), access_log=None, handle_signals=False)
        await self._runner.setup()
        try:
            await web.TCPSite(self._runner, a.host, a.port, reuse_address=True).start()
        except OSError as err:
            await self._hang(err)
        self.bound = True
        log.line(f"INFO:     Uvicorn running on http://{a.host}:{a.port} (Press CTRL+C to quit)")
        if not a.skip_server_warmup:
            port = random.Random(self.pid).randrange(32768, 60999)
            log.line(f'INFO:     127.0.0.1:{port} - "GET /model_info HTTP/1.1" 200 OK')
            req = self.scheduler.submit(3 if a.skip_tokenizer_init else 6, 8)
            await req.done.wait()
        self.ready = True
        log.line(FIRED_UP)

    def _serving_memory(self) -> ServingMemory | None:
        if self.profile.serving_gib_per_token <= 0:
            return None

        def on_oom(need_gib: float) -> None:
            task = asyncio.get_running_loop().create_task(self._serving_oom(need_gib))
            self._tasks.add(task)

        return ServingMemory(
            self.plan.final_avail,
            self.profile.serving_gib_per_token,
            self.profile.serving_oom_after_requests,
            on_oom,
        )

    async def _serving_oom(self, need_gib: float) -> None:
        """SGLang 0.5.17's end after a forward ran out of memory while serving (the llama8b-live fixture):
        the scheduler dies, the launcher sleeps 5 s before its crash diagnostics while the requests in
        flight hang, then kills its tree; the clients' connections drop a moment before it is gone."""
        free = self.plan.final_avail  # what start-up left; the forward asked for more
        total = self.plan.torch_total_gib
        oom = logtext.torch_oom(
            tried_mib=need_gib * 1024,
            total_gib=total,
            free_mib=free * 1024,
            in_use_gib=total - free,
            context_gib=self.profile.cuda_context_gib + self.profile.dist_init_gib,
            graphs=True,
        )
        self.log.line("Scheduler hit an exception: " + logtext.serving_oom(oom), rank=True)
        self.log.line(logtext.SIGQUIT_LINE)
        self.log.line(logtext.CRASH_SLEEP_LINE)
        await self._wait(5.0)
        self.log.line(logtext.NO_SCHEDULER_LINE)
        self.log.line(f"kill_process_tree called: parent_pid={self.pid}, include_parent=True, pid={self.pid}")
        for transport in list(self.open_streams):  # the streams end mid-payload, the port closes
            transport.close()
        if self._runner is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._runner.cleanup(), 1.0)
        await asyncio.sleep(1.0)  # the launcher's own teardown, after its children's
        self.gpus.remove()
        os.kill(self.pid, signal.SIGKILL)

    async def _hang(self, err: OSError) -> None:
        """Port taken: SGLang logs the bind error after the whole start-up, keeps its GPU memory and
        never exits by itself (SIGTERM is ignored); only a SIGKILL ends it."""
        a = self.args
        self.log.line(
            f"ERROR:    [Errno {err.errno}] error while attempting to bind on address "
            f"('{a.host}', {a.port}): {os.strerror(err.errno).lower() if err.errno else err}"
        )
        self.log.line("INFO:     Waiting for application shutdown.")
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, lambda: None)
        await asyncio.Event().wait()

    async def _shutdown(self) -> int:
        log = self.log
        if self._stop_kind == "term":
            log.line("SIGTERM received. signum=None frame=None. Draining requests and shutting down...")
            self.draining = True
            while self.scheduler is not None and not self.scheduler.idle:
                await asyncio.sleep(0.02)
            await self._wait(5.0)
            log.line(
                "Gracefully exiting... Remaining number of requests 0. Remaining requests remaining_rids=[]."
            )
            log.line(f"kill_process_tree called: parent_pid={self.pid}, include_parent=True, pid={self.pid}")
            self.gpus.remove()
            os.kill(self.pid, signal.SIGKILL)
        if self.bound:
            log.line("INFO:     Shutting down")
            log.line("INFO:     Waiting for application shutdown.")
            log.line("INFO:     Application shutdown complete.")
            log.line(f"INFO:     Finished server process [{self.pid}]")
        if self.scheduler is not None:
            for req in [*self.scheduler.running, *self.scheduler.waiting]:
                self.scheduler.abort(req)
        log.line(f"kill_process_tree called: parent_pid={self.pid}, include_parent=False, pid={self.pid}")
        if self.bound:
            log.line(
                f"Subprocess detokenizer (pid={self.pid + 2}) crashed with exit code -9. "
                "Triggering SIGQUIT for cleanup..."
            )
        self.gpus.remove()
        if self._runner is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._runner.cleanup(), 1.0)
        return 0


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry: parse like SGLang (argparse exits 2 on a bad flag), then run until stopped."""
    if isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(line_buffering=True)
    try:
        args, profile = parse(list(sys.argv[1:] if argv is None else argv), load_profile)
    except ArgsError as err:
        sys.stderr.write(err.traceback)
        return 1
    except (FileNotFoundError, ValidationError, ValueError) as err:
        sys.stderr.write(f"simulated node: bad profile: {err}\n")
        return 2
    # aiohttp's own log lines (a client hanging up mid-stream, ...) are not SGLang's: keep them out.
    logging.getLogger("aiohttp").addHandler(logging.NullHandler())
    logging.getLogger("aiohttp").propagate = False
    server = SimServer(args, profile)
    try:
        return asyncio.run(server.run())
    except KeyboardInterrupt:
        server.gpus.remove()
        return 0


if __name__ == "__main__":
    sys.exit(main())
