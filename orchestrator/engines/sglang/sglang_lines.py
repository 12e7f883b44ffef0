"""The SGLang log lines the parser reads, as compiled patterns, for 0.5.5 to 0.5.23.

Each shape was read off the version's own log statement and checked against real 0.5.17 logs; the
comments say which version prints which variant (the tests' fixtures hold a line of each).
"""

from __future__ import annotations

import re

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# `[2026-11-29 11:35:41] `, `[2026-11-29 11:35:41 TP0] `, `[... DP0 TP0 EP0] `; a bare `[TP3] ` too.
PREFIX = re.compile(
    r"^\[(?:\d{4}-\d\d-\d\d[ T][\d:.,]+(?P<tags>[^\]]*)|(?P<bare>[A-Z]+\d+(?: [A-Z]+\d+)*))\] ?"
)
TAG = re.compile(r"([A-Z]+)(\d+)")
# Where a rank's line starts in the middle of another's: with tp > 1 a progress bar printed without a
# newline (`Multi-thread loading shards: 0% ...`) gets the next rank's line glued to its end.
EMBEDDED_PREFIX = re.compile(r"(?<=.)(?=\[\d{4}-\d\d-\d\d[ T][\d:.,]+(?: [A-Z]+\d+)*\] )")

GB = r"([\d.]+) GB"
WEIGHT_BEGIN = re.compile(rf"^Load weight begin\. avail mem={GB}")
# `elapsed=` from 0.5.9; `dtype=X, ` up to 0.5.9, then an optional `quant=fp8, fmt=e4m3, ` from 0.5.14.
WEIGHT_END = re.compile(
    r"^Load weight end\. (?:elapsed=(?P<elapsed>[\d.]+) s, )?type=(?P<cls>[\w.]+), (?P<mid>.*?)"
    r"avail mem=(?P<after>[\d.]+) GB, mem usage=(?P<usage>[\d.]+) GB"
)
# `dtype: X, ` from 0.5.14; MLA pools print one `KV size`; 0.5.23 may say `VA upper bound` (reserved
# address space, sized for real after capture) and hybrid pools lead with a label ("Full", "SWA").
KV = re.compile(
    r"^(?:(?P<label>.+?) )?KV Cache (?P<how>is allocated|VA upper bound)\. (?:dtype: (?P<dtype>[^,]+), )?"
    r"#tokens: (?P<tokens>\d+), "
    r"(?:K size: (?P<k>[\d.]+) GB, V size: (?P<v>[\d.]+) GB|KV size: (?P<kv>[\d.]+) GB)"
)
POOL_END = re.compile(rf"^Memory pool end\. avail mem={GB}")
# <= 0.5.9: `Capture cuda graph begin` (target), `Capture draft [extend ]cuda graph begin [(step N)]`,
# with `Time elapsed: X s. mem usage=X GB. avail mem=X GB.` at the end; 0.5.14+: `Capture target verify
# CUDA graph begin. backend=..., num_tokens_per_bs|req=..., bs=[...], avail mem=X GB` and
# `... end. elapsed=X s, mem usage=X GB, avail mem=X GB.`
CAPTURE = re.compile(
    r"^Capture (?P<name>[\w -]*?)\s*(?:cuda|CUDA|cpu|npu) graph(?: for [^.]*?)? "
    r"(?P<phase>begin|end)\b(?P<rest>.*)"
)
# 0.5.17 with --speculative-adaptive, once per extra tier: `Built adaptive runtime state steps=0:
# elapsed=1.76s, mem=0.10GB`.
ADAPTIVE_STATE = re.compile(r"^Built adaptive runtime state steps=(\d+): elapsed=([\d.]+)s, mem=([\d.]+)GB")
# ... and each time it changes tier at run time: `Switch adaptive runtime state: steps 7 -> 3, draft_tokens
# 8 -> 4` (seen on the H200, about 140 times each way in an 8 s stage at concurrency 8).
ADAPTIVE_SWITCH = re.compile(r"^Switch adaptive runtime state: steps (\d+) -> (\d+)")
AVAIL = re.compile(rf"avail mem={GB}")
USAGE = re.compile(rf"mem usage={GB}")
ELAPSED = re.compile(r"(?:elapsed=|Time elapsed: )([\d.]+) s")
BS = re.compile(r"\bbs=\[([^\]]*)\]")
NUM_TOKENS = re.compile(r"\bnum_tokens=\[([^\]]*)\]")
BACKEND = re.compile(r"\bbackend=(\w+)")
MAX_TOTAL = re.compile(r"^max_total_num_tokens=(\d+)")
KEYVAL_INT = re.compile(r"(\w+)=(\d+)")
AVAILABLE_GPU_MEM = re.compile(rf"available_gpu_mem={GB}")
RESET = re.compile(r"Max running requests is reset to (\d+)")
DECODE = re.compile(r"^Decode batch\b")
ACCEPT = re.compile(r"accept len: ([\d.]+)")
GEN_TPUT = re.compile(r"gen throughput \(token/s\): ([\d.]+)")
RETRACT = re.compile(r"KV cache pool is full\. Retract requests\.")
RETRACTED = re.compile(r"#retracted_reqs: (\d+)")
READY = "The server is fired up and ready to roll!"
SHUTDOWN = re.compile(
    r"SIGTERM received|SIGINT received|INFO:\s+Shutting down|Gracefully exiting"
    r"|Waiting for application shutdown"
)

TRACEBACK = "Traceback (most recent call last)"
# The last line of a traceback: a (dotted) exception name, then its message or nothing.
EXC_LINE = re.compile(
    r"^(?P<name>(?:[A-Za-z_]\w*\.)+[A-Z]\w*|[A-Z]\w*(?:Error|Exception|Exit|Interrupt|Failure|Fault|Timeout)|Exception)"
    r"(?::(?P<text>.*))?$"
)
FRAME = re.compile(r'^\s+File "(?P<path>[^"]+)", line \d+, in (?P<func>\S+)')
TRIED = re.compile(r"Tried to allocate [\d.]+ [KMGT]i?B")
TRY_TOKENS = re.compile(r"^Try to allocate \d+ tokens")  # the line after `Prefill/Decode out of memory`

KV_OOM = re.compile(
    r"Not enough memory\. Please try to increase --mem-fraction-static"
    r"|Loaded weights leave no GPU memory for the KV cache"
    r"|Memory pool size is too small"
)
RUNTIME_OOM = re.compile(
    r"(?:Prefill|Decode) out of memory\. Try to lower your batch size|alloc_req_slots runs out of memory"
)
CUDA_OOM = re.compile(
    r"CUDA out of memory|OutOfMemoryError|CUDA error: out of memory|CUDA_ERROR_OUT_OF_MEMORY"
    r"|Triton Error \[CUDA\]: out of memory"  # a Triton kernel launch under load (0.5.17, H200)
    r"|cudaErrorMemoryAllocation|CUBLAS_STATUS_ALLOC_FAILED"
)
GRAPH_FAILED = "Capture cuda graph failed"
CUBLAS_OOM = "CUBLAS_STATUS_ALLOC_FAILED"
PORT = re.compile(r"\[Errno 98\]|address already in use", re.IGNORECASE)
FATAL_LINE = re.compile(
    r"Rank \d+ scheduler is dead|Received sigquit from a child process"
    r"|Subprocess \S+ .*crashed with exit code|Initialization failed\. warmup error"
)
ARGPARSE_ERROR = re.compile(r"^[\w./-]+: error: ")

# Traceback frames that place a failure: graph set-up and capture (attention back-end and cuBLAS
# set-up come right before the first capture), KV pool sizing, and the draft worker.
GRAPH_FRAME = re.compile(
    r"cuda_graph|graph_runner|init_device_graphs|:_?capture\b|capture_(?:one|cuda|decode|prefill)"
    r"|init_attention_backend|build_attention_backends|init_cublas"
)
KV_FRAME = re.compile(
    r"init_memory_pool|alloc_memory_pool|kv_cache_configurator|profile_max_num_token|resize_kv_pool"
)
DRAFT_PATH = re.compile(r"draft|eagle_worker|standalone_worker|mtp_worker")
