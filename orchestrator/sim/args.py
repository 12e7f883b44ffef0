"""SGLang's launch flags and the rules SGLang applies to them before anything is loaded.

The simulated node must refuse what SGLang refuses (an unknown flag exits 2 as argparse does) and
resolve what SGLang resolves (auto ``mem_fraction_static``, graph batch sizes by GPU size, the silent
reset of ``max_running_requests`` to 48 under speculation, draft tokens forced to steps + 1 at top-k 1),
because those are exactly the things a sweep can get wrong.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.errors import SpecsweepError
from orchestrator.footprint.sglang_defaults import default_graph_settings
from orchestrator.sim.profile import SimProfile
from orchestrator.sim.tiers import adaptive_refusal

EAGLE_FAMILY = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE")
MRR_RESET_LINE = (
    "Max running requests is reset to 48 for speculative decoding. You can override this by explicitly "
    "setting --max-running-requests."
)
TOPK1_LINE = (
    "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when speculative_eagle_topk == 1"
)
DEPRECATED_GRAPH_BS = (
    "\x1b[1;33m'--cuda-graph-max-bs' is deprecated and will be removed in a future release. "
    "Use '--cuda-graph-max-bs-decode' instead.\x1b[0m"
)
DEPRECATED_DISABLE_GRAPH = (
    "\x1b[1;33m'--disable-cuda-graph' is deprecated and will be removed in a future release. "
    "Use '--cuda-graph-backend-decode=disabled' and '--cuda-graph-backend-prefill=disabled' instead.\x1b[0m"
)
PREFILL_GRAPH_TOKENS = (
    list(range(4, 33, 4))
    + list(range(48, 257, 16))
    + list(range(288, 513, 32))
    + list(range(576, 1025, 64))
    + list(range(1280, 4097, 256))
    + list(range(4608, 8193, 512))
)
LOAD_FORMATS = ("auto", "pt", "safetensors", "npcache", "dummy", "sharded_state", "gguf", "bitsandbytes")
KV_DTYPES = ("auto", "fp8_e5m2", "fp8_e4m3", "bf16", "bfloat16")
GRAPH_BACKENDS = ("full", "breakable", "tc_piecewise", "disabled")


class ArgsError(SpecsweepError):
    """SGLang would die while parsing its arguments; ``traceback`` is what it prints."""

    def __init__(self, traceback: str) -> None:
        super().__init__(traceback.splitlines()[-1])
        self.traceback = traceback


@dataclass(frozen=True)
class SimArgs:
    """The launch flags after SGLang's own resolution, plus the simulator's three."""

    model_path: str
    tokenizer_path: str
    served_model_name: str
    tp_size: int
    speculative_algorithm: str | None
    draft_model_path: str | None
    draft_load_format: str | None
    speculative_num_steps: int | None
    speculative_eagle_topk: int | None
    speculative_num_draft_tokens: int | None
    mem_fraction_static: float
    cuda_graph_max_bs: int
    max_running_requests: int | None  # None: derived from the KV pool once it is sized
    disable_cuda_graph: bool
    disable_prefill_graph: bool
    load_format: str
    skip_tokenizer_init: bool
    enable_metrics: bool
    host: str
    port: int
    attention_backend: str | None
    sampling_backend: str | None
    grammar_backend: str | None
    context_length: int | None
    chunked_prefill_size: int
    max_prefill_tokens: int
    max_total_tokens: int | None
    kv_cache_dtype: str
    log_level: str
    random_seed: int
    decode_log_interval: int
    skip_server_warmup: bool
    trust_remote_code: bool
    dtype: str
    page_size: int
    sim_profile: str
    sim_state_dir: Path
    sim_startup_time_scale: float | None
    api_key: str | None = None
    admin_api_key: str | None = None
    ssl_keyfile_password: str | None = None
    speculative_adaptive: bool = False
    speculative_adaptive_config: str | None = None
    raw_notes: tuple[str, ...] = ()  # printed without a timestamp (the launcher's stderr warnings)
    log_notes: tuple[str, ...] = ()  # printed as log lines before server_args
    explicit: frozenset[str] = field(default_factory=frozenset)

    @property
    def speculative(self) -> bool:
        return self.speculative_algorithm is not None


def build_parser() -> argparse.ArgumentParser:
    """The subset of ``sglang.launch_server`` flags a sweep uses; anything else is an error, as in SGLang."""
    p = argparse.ArgumentParser(prog="launch_server.py")
    a = p.add_argument
    a("--model-path", "--model", dest="model_path", required=True)
    a("--tokenizer-path", default=None)
    a("--served-model-name", default=None)
    a("--tp-size", "--tensor-parallel-size", dest="tp_size", type=int, default=1)
    a("--speculative-algorithm", default=None)
    a("--speculative-draft-model-path", "--speculative-draft-model", dest="draft_model_path", default=None)
    a("--speculative-draft-load-format", default=None, choices=LOAD_FORMATS)
    a("--speculative-num-steps", type=int, default=None)
    a("--speculative-eagle-topk", type=int, default=None)
    a("--speculative-num-draft-tokens", type=int, default=None)
    a("--speculative-adaptive", action="store_true")
    a("--speculative-adaptive-config", default=None)
    a("--mem-fraction-static", type=float, default=None)
    a("--cuda-graph-max-bs", dest="cuda_graph_max_bs_legacy", type=int, default=None)
    a("--cuda-graph-max-bs-decode", type=int, default=None)
    a("--cuda-graph-backend-decode", choices=GRAPH_BACKENDS, default=None)
    a("--cuda-graph-backend-prefill", choices=GRAPH_BACKENDS, default=None)
    a("--disable-cuda-graph", action="store_true")
    a("--disable-cuda-graph-padding", action="store_true")
    a("--max-running-requests", type=int, default=None)
    a("--max-total-tokens", type=int, default=None)
    a("--max-prefill-tokens", type=int, default=16384)
    a("--chunked-prefill-size", type=int, default=None)
    a("--context-length", type=int, default=None)
    a("--load-format", choices=LOAD_FORMATS, default="auto")
    a("--kv-cache-dtype", choices=KV_DTYPES, default="auto")
    a("--dtype", default="auto")
    a("--trust-remote-code", action="store_true")
    a("--skip-tokenizer-init", action="store_true")
    a("--skip-server-warmup", action="store_true")
    a("--enable-metrics", action="store_true")
    a("--host", default="127.0.0.1")
    a("--port", type=int, default=30000)
    a("--attention-backend", default=None)
    a("--sampling-backend", choices=("pytorch", "flashinfer", "ascend"), default=None)
    a("--grammar-backend", choices=("xgrammar", "outlines", "llguidance", "none"), default=None)
    a("--log-level", default="info")
    a("--random-seed", type=int, default=None)
    a("--decode-log-interval", type=int, default=40)
    a("--page-size", type=int, default=1)
    a("--disable-radix-cache", action="store_true")
    a("--disable-overlap-schedule", action="store_true")
    a("--watchdog-timeout", type=float, default=300)
    a("--api-key", default=None)
    a("--admin-api-key", default=None)
    a("--ssl-keyfile-password", default=None)
    a("--sim-profile", required=True, help="simulated node profile: built-in name or YAML/JSON file")
    a("--sim-state-dir", required=True, type=Path, help="where the fake NVML state lives")
    a("--sim-startup-time-scale", type=float, default=None, help="override the profile's start-up scale")
    return p


def auto_mem_fraction(
    gpu_mem_mib: float, *, chunked_prefill_size: int, cuda_graph_max_bs: int, tp_size: int, speculative: bool
) -> float:
    """SGLang's auto ``mem_fraction_static`` (reserve for activations and graphs, plus 2 GiB for EAGLE)."""
    reserved = 512 + max(chunked_prefill_size, 2048) * 1.5 + cuda_graph_max_bs * 2 + tp_size / 8 * 1024
    if gpu_mem_mib > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    if speculative:
        reserved += 2 * 1024
    return round((gpu_mem_mib - reserved) / gpu_mem_mib, 3)


def _assertion_traceback(site: str) -> str:
    return (
        "Traceback (most recent call last):\n"
        '  File "<frozen runpy>", line 198, in _run_module_as_main\n'
        '  File "<frozen runpy>", line 88, in _run_code\n'
        f'  File "{site}/launch_server.py", line 31, in <module>\n'
        "    server_args = prepare_server_args(sys.argv[1:])\n"
        "                  ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^\n"
        f'  File "{site}/srt/server_args.py", line 6127, in prepare_server_args\n'
        "    return ServerArgs.from_cli_args(raw_args)\n"
        "           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^\n"
        f'  File "{site}/srt/server_args.py", line 1012, in __post_init__\n'
        "    self._handle_speculative_decoding()\n"
        f'  File "{site}/srt/server_args.py", line 2874, in _handle_speculative_decoding\n'
        "    assert (\n"
        "           ^\n"
        "AssertionError\n"
    )


SITE = "/usr/local/lib/python3.12/dist-packages/sglang"


def resolve(ns: argparse.Namespace, profile: SimProfile, explicit: frozenset[str]) -> SimArgs:
    """Apply SGLang's rules; raises ArgsError with the traceback SGLang would print."""
    raw_notes: list[str] = []
    log_notes: list[str] = []
    gpu_mem = profile.gpu_total_mib
    chunked_default, graph_bs_default = default_graph_settings(gpu_mem, ns.tp_size)
    chunked = ns.chunked_prefill_size or profile.chunked_prefill_size or chunked_default

    graph_bs = ns.cuda_graph_max_bs_decode
    if ns.cuda_graph_max_bs_legacy is not None:
        raw_notes.append(DEPRECATED_GRAPH_BS)
        graph_bs = graph_bs if graph_bs is not None else ns.cuda_graph_max_bs_legacy
    graph_bs = graph_bs if graph_bs is not None else graph_bs_default
    if ns.disable_cuda_graph:
        raw_notes.append(DEPRECATED_DISABLE_GRAPH)
    disable_decode = ns.disable_cuda_graph or ns.cuda_graph_backend_decode == "disabled"
    disable_prefill = ns.disable_cuda_graph or ns.cuda_graph_backend_prefill == "disabled"

    algo = ns.speculative_algorithm.upper() if ns.speculative_algorithm else None
    if algo is not None and algo not in EAGLE_FAMILY:
        raise ArgsError(
            f"ValueError: speculative algorithm {ns.speculative_algorithm!r} is not supported by this node; "
            f"use one of {', '.join(EAGLE_FAMILY)}\n"
        )
    steps, topk, draft_tokens = (
        ns.speculative_num_steps,
        ns.speculative_eagle_topk,
        ns.speculative_num_draft_tokens,
    )
    mrr = ns.max_running_requests
    if algo is not None:
        given = [v is not None for v in (steps, topk, draft_tokens)]
        if any(given) and not all(given):
            raise ArgsError(_assertion_traceback(SITE))
        if not any(given):
            steps, topk, draft_tokens = 5, 4, 8  # SGLang's auto choice for most architectures
        assert steps is not None and topk is not None and draft_tokens is not None
        if mrr is None:
            mrr = 48
            log_notes.append(MRR_RESET_LINE)
        if topk == 1 and draft_tokens != steps + 1:
            log_notes.append(TOPK1_LINE)
            draft_tokens = steps + 1
    elif any(v is not None for v in (steps, topk, draft_tokens)):
        steps = topk = draft_tokens = None  # SGLang ignores them without an algorithm

    if ns.speculative_adaptive or ns.speculative_adaptive_config:
        refused = adaptive_refusal(
            ns.speculative_adaptive, ns.speculative_adaptive_config, profile.sglang_version, algo, topk
        )
        if refused:
            raise ArgsError(refused)

    fraction = ns.mem_fraction_static
    if fraction is None:
        base = auto_mem_fraction(
            gpu_mem,
            chunked_prefill_size=chunked,
            cuda_graph_max_bs=graph_bs,
            tp_size=ns.tp_size,
            speculative=algo is not None,
        )
        fraction = round(base * profile.auto_mem_fraction_factor, 3)
    if ns.skip_tokenizer_init:
        log_notes.insert(
            0,
            "skip_tokenizer_init=True: string-based stop conditions (stop, stop_regex) and min_new_tokens "
            "are unavailable.",
        )
    seed = ns.random_seed if ns.random_seed is not None else 0
    return SimArgs(
        api_key=ns.api_key,
        admin_api_key=ns.admin_api_key,
        ssl_keyfile_password=ns.ssl_keyfile_password,
        model_path=ns.model_path,
        tokenizer_path=ns.tokenizer_path or ns.model_path,
        served_model_name=ns.served_model_name or ns.model_path,
        tp_size=ns.tp_size,
        speculative_algorithm=algo,
        draft_model_path=ns.draft_model_path,
        draft_load_format=ns.speculative_draft_load_format,
        speculative_num_steps=steps,
        speculative_eagle_topk=topk,
        speculative_num_draft_tokens=draft_tokens,
        mem_fraction_static=float(fraction),
        cuda_graph_max_bs=int(graph_bs),
        max_running_requests=mrr,
        disable_cuda_graph=disable_decode,
        disable_prefill_graph=disable_prefill,
        load_format=ns.load_format,
        skip_tokenizer_init=ns.skip_tokenizer_init,
        enable_metrics=ns.enable_metrics,
        host=ns.host,
        port=ns.port,
        attention_backend=ns.attention_backend,
        sampling_backend=ns.sampling_backend,
        grammar_backend=ns.grammar_backend,
        context_length=ns.context_length,
        chunked_prefill_size=chunked,
        max_prefill_tokens=ns.max_prefill_tokens,
        max_total_tokens=ns.max_total_tokens,
        kv_cache_dtype=ns.kv_cache_dtype,
        log_level=ns.log_level,
        random_seed=seed,
        decode_log_interval=max(1, ns.decode_log_interval),
        skip_server_warmup=ns.skip_server_warmup,
        trust_remote_code=ns.trust_remote_code,
        dtype=ns.dtype,
        page_size=ns.page_size,
        sim_profile=ns.sim_profile,
        sim_state_dir=ns.sim_state_dir,
        sim_startup_time_scale=ns.sim_startup_time_scale,
        speculative_adaptive=bool(ns.speculative_adaptive) and algo is not None,
        speculative_adaptive_config=ns.speculative_adaptive_config,
        raw_notes=tuple(raw_notes),
        log_notes=tuple(log_notes),
        explicit=explicit,
    )


def explicit_dests(parser: argparse.ArgumentParser, argv: Sequence[str]) -> frozenset[str]:
    """Which destinations the command line set (SGLang logs some choices only when they were implicit)."""
    names = {a.split("=", 1)[0] for a in argv if a.startswith("--")}
    out = set()
    for action in parser._actions:
        if any(opt in names for opt in action.option_strings):
            out.add(action.dest)
    return frozenset(out)


def parse(argv: Sequence[str], profile_loader: Any) -> tuple[SimArgs, SimProfile]:
    """Parse and resolve; argparse exits 2 on an unknown flag, exactly like SGLang's own parser."""
    parser = build_parser()
    ns = parser.parse_args(list(argv))
    profile: SimProfile = profile_loader(ns.sim_profile)
    return resolve(ns, profile, explicit_dests(parser, argv)), profile
