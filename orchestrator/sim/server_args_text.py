"""The ``server_args=ServerArgs(...)`` line the simulated server prints, as SGLang renders it.

A realistic subset of SGLang's ``ServerArgs`` in its own order, with the values resolved by ``args``;
the log parser reads the real line's shape, so this one must match it (credentials included, which the
sweep must scrub).
"""

from __future__ import annotations

from typing import Any

from orchestrator.footprint.sglang_defaults import capture_sizes
from orchestrator.sim.args import PREFILL_GRAPH_TOKENS, SimArgs
from orchestrator.sim.profile import SimProfile


def _phase(backend: str, max_bs: int, sizes: list[int]) -> str:
    return (
        f"PhaseConfig(backend={backend!r}, max_bs={max_bs}, bs={sizes!r}, tc_compiler='eager', "
        "full_prefill_max_req=None, full_prefill_prefix_chunk_tokens=None)"
    )


def server_args_items(args: SimArgs, profile: SimProfile) -> list[tuple[str, Any]]:
    """A realistic subset of ``ServerArgs`` in SGLang's order, with the resolved values."""
    decode_bs = capture_sizes(args.cuda_graph_max_bs, args.speculative, None)
    decode_backend = "disabled" if args.disable_cuda_graph else "full"
    prefill_backend = "disabled" if args.disable_prefill_graph else "breakable"
    graph_config = {
        "decode": {"backend": decode_backend, "max_bs": args.cuda_graph_max_bs, "bs": decode_bs},
        "prefill": {
            "backend": prefill_backend,
            "max_bs": PREFILL_GRAPH_TOKENS[-1],
            "bs": PREFILL_GRAPH_TOKENS,
        },
    }
    return [
        ("model_path", args.model_path),
        ("tokenizer_path", args.tokenizer_path),
        ("tokenizer_mode", "auto"),
        ("skip_tokenizer_init", args.skip_tokenizer_init),
        ("load_format", args.load_format),
        ("trust_remote_code", args.trust_remote_code),
        ("context_length", args.context_length),
        ("is_embedding", False),
        ("revision", None),
        ("dtype", args.dtype),
        ("quantization", profile.quantization),
        ("kv_cache_dtype", args.kv_cache_dtype),
        ("mem_fraction_static", args.mem_fraction_static),
        ("max_running_requests", args.max_running_requests),
        ("max_queued_requests", None),
        ("max_total_tokens", args.max_total_tokens),
        ("chunked_prefill_size", args.chunked_prefill_size),
        ("max_prefill_tokens", args.max_prefill_tokens),
        ("schedule_policy", "fcfs"),
        ("retraction_policy", "length"),
        ("schedule_conservativeness", 1.0),
        ("page_size", args.page_size),
        ("disable_radix_cache", False),
        ("disable_overlap_schedule", False),
        ("nnodes", 1),
        ("node_rank", 0),
        ("tp_size", args.tp_size),
        ("pp_size", 1),
        ("dp_size", 1),
        ("device", "cuda"),
        ("base_gpu_id", 0),
        ("random_seed", args.random_seed),
        ("watchdog_timeout", 300),
        ("host", args.host),
        ("port", args.port),
        ("skip_server_warmup", args.skip_server_warmup),
        # 0.5.17 prints the credentials in clear, right here: what the sweep must scrub.
        ("ssl_keyfile_password", args.ssl_keyfile_password),
        ("enable_ssl_refresh", False),
        ("api_key", args.api_key),
        ("admin_api_key", args.admin_api_key),
        ("served_model_name", args.served_model_name),
        ("weight_version", "default"),
        ("log_level", args.log_level),
        ("enable_metrics", args.enable_metrics),
        ("decode_log_interval", args.decode_log_interval),
        ("attention_backend", args.attention_backend),
        ("sampling_backend", args.sampling_backend),
        ("grammar_backend", args.grammar_backend),
        ("cuda_graph_config", graph_config),
        ("cuda_graph_backend_decode", None),
        ("cuda_graph_backend_prefill", None),
        ("cuda_graph_max_bs_decode", args.cuda_graph_max_bs),
        ("cuda_graph_max_bs_prefill", None),
        ("cuda_graph_bs_decode", None),
        ("disable_prefill_cuda_graph", False),
        ("disable_decode_cuda_graph", False),
        ("disable_cuda_graph", args.disable_cuda_graph),
        ("disable_cuda_graph_padding", False),
        ("speculative_algorithm", args.speculative_algorithm),
        ("speculative_draft_model_path", args.draft_model_path),
        ("speculative_draft_model_revision", "main" if args.speculative else None),
        ("speculative_draft_load_format", args.draft_load_format),
        ("speculative_num_steps", args.speculative_num_steps),
        ("speculative_eagle_topk", args.speculative_eagle_topk),
        ("speculative_num_draft_tokens", args.speculative_num_draft_tokens),
        ("speculative_accept_threshold_single", 1.0),
        ("speculative_accept_threshold_acc", 1.0),
        ("speculative_attention_mode", "prefill"),
        ("ep_size", 1),
        ("moe_a2a_backend", "none"),
        ("moe_runner_backend", "auto"),
        ("enable_hierarchical_cache", False),
        ("enable_lora", None),
        ("cpu_offload_gb", 0),
    ]


def render_server_args(items: list[tuple[str, Any]]) -> str:
    """``ServerArgs(...)`` as SGLang's dataclass repr prints it (Python reprs, nested configs)."""
    parts = []
    for key, value in items:
        if key == "cuda_graph_config":
            d, pf = value["decode"], value["prefill"]
            text = (
                f"CudaGraphConfig(decode={_phase(d['backend'], d['max_bs'], d['bs'])}, "
                f"prefill={_phase(pf['backend'], pf['max_bs'], pf['bs'])})"
            )
        else:
            text = repr(value)
        parts.append(f"{key}={text}")
    return "ServerArgs(" + ", ".join(parts) + ")"
