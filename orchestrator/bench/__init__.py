"""Benchmark client: synthetic and dataset workloads, a streaming /generate client and bench_serving's
metrics.

Importing this package loads nothing: the client (and aiohttp) comes with `bench.client`.
"""
