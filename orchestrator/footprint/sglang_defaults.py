"""SGLang's own defaults and scheduler constants that the driver's memory model and the simulated server
both follow, so that neither imports the other for them.

- The default chunked prefill size and largest captured batch by GPU memory
  (``python/sglang/srt/server_args.py``), `default_graph_settings`.
- The decode batch sizes it captures as CUDA graphs, with speculation and without
  (``cuda_graph_runner.get_batch_sizes_to_capture``), `capture_sizes`.
- The scheduler's new-token ratio: a waiting request is admitted while the KV pool holds its prompt plus
  this share of what every running request will still generate; it starts at 0.7 and decays each decode
  step to 0.1 (``schedule_policy.py``, ``scheduler.py``).
"""

from __future__ import annotations

INIT_NEW_TOKEN_RATIO = 0.7
MIN_NEW_TOKEN_RATIO = 0.1
NEW_TOKEN_RATIO_DECAY = (INIT_NEW_TOKEN_RATIO - MIN_NEW_TOKEN_RATIO) / 600


def default_graph_settings(gpu_mem_mib: float, tp_size: int) -> tuple[int, int]:
    """SGLang's (chunked_prefill_size, cuda_graph_max_bs) by GPU memory, as in ``server_args.py``."""
    if gpu_mem_mib < 20 * 1024:
        return 2048, 8
    if gpu_mem_mib < 35 * 1024:
        return 2048, 24 if tp_size < 4 else 80
    if gpu_mem_mib < 60 * 1024:
        return 4096, 32 if tp_size < 4 else 160
    if gpu_mem_mib < 160 * 1024:
        return 8192, 256 if tp_size < 4 else 512
    return 16384, 512


def capture_sizes(max_bs: int, speculative: bool, max_running: int | None) -> list[int]:
    """SGLang's captured decode batch sizes: its list up to ``max_bs``, with ``max_bs`` itself where the list
    lacks it (`ServerArgs._generate_decode_cuda_graph_batch_sizes`; graph bs 100 captured 96 and 100 on
    0.5.17), then capped at the request pool (``max_running``; None: uncapped), whose own size it adds when
    it dropped any size above it."""
    if speculative:
        sizes = [*range(1, 9), *range(10, 33, 2), *range(40, 65, 4), *range(72, 257, 8)]
        sizes += list(range(272, max(max_bs, 272) + 1, 16))
    else:
        sizes = [1, 2, 4, 8, 12, *range(16, 257, 8), *range(272, 512, 16)]
        sizes += list(range(512, max(max_bs, 512) + 1, 32))
    sizes = [bs for bs in sizes if bs <= max_bs]
    if max_bs not in sizes:
        sizes.append(max_bs)
    if max_running is not None and sizes and max(sizes) > max_running:
        sizes = [bs for bs in sizes if bs <= max_running]
        if max_running not in sizes:
            sizes.append(max_running)
    return sizes
