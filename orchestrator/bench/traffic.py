"""A stage's requests from the spec's datasets, and its figures per dataset.

Several datasets are mixed in one stage, each given its weight's share of ``num_prompts`` and
interleaved, so a stage serves the traffic mix the user described and its throughput is the weighted
objective. Per dataset, the same stage's requests give that dataset's acceptance and its share of the
throughput (its output tokens over the stage's duration).

For text, ``input_len`` and ``output_len`` are upper bounds: a longer prompt keeps its last
``input_len`` ids (the most recent turns), and an output is the length of the answer that followed the
prompt in the dataset (or its ``max_tokens``), else ``output_len``, capped at ``output_len``.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from pathlib import Path

from orchestrator.bench.chatgen import generated_chat
from orchestrator.bench.client import RequestOutcome
from orchestrator.bench.metrics import stage_metrics
from orchestrator.bench.textdata import (
    Conversation,
    DatasetError,
    DatasetKind,
    DatasetRef,
    load_jsonl,
    load_sharegpt,
)
from orchestrator.bench.tokenizer import ChatTokenizer, load_tokenizer
from orchestrator.bench.workload import RequestSpec, synthetic_requests
from orchestrator.records import DatasetMetrics
from orchestrator.spec import Backend, SweepSpec
from orchestrator.spec_search import SpecError

_METRIC_UNSAFE = re.compile(r"[^A-Za-z0-9_.\-]")


def metric_name(ref: DatasetRef) -> str:
    """A name MLflow accepts in a metric key (no colons or slashes)."""
    return _METRIC_UNSAFE.sub("_", ref.name.replace(":", "-"))


def tokenizer_path(spec: SweepSpec) -> str:
    """Where the text datasets' tokenizer comes from; '' for the simulated node's built-in one."""
    if spec.workload.tokenizer:
        return spec.workload.tokenizer
    return "" if spec.backend is Backend.SIMULATED else spec.model.path


def check_workload(spec: SweepSpec) -> list[RequestSpec]:
    """Build the benchmark's requests on the driver, so a bad dataset or a missing tokenizer is a
    `SpecError` naming ``workload.dataset`` before any GPU is claimed."""
    try:
        return list(build_requests(spec))
    except (DatasetError, ValueError) as err:
        raise SpecError(f"workload.dataset: {err}") from None


def build_requests(spec: SweepSpec) -> tuple[RequestSpec, ...]:
    """The requests of every benchmark stage: the same for the same spec, on every node."""
    # Keyed by the workload's JSON and the tokenizer (the spec itself is not hashable): a node that
    # runs several trials reads and tokenizes a dataset once.
    key = (spec.workload.model_dump_json(), tokenizer_path(spec))
    built = _BUILT.get(key)
    if built is None:
        built = _build(key[1], spec)
        _BUILT.clear()  # one workload per sweep: keep only the latest
        _BUILT[key] = built
    return built


_BUILT: dict[tuple[str, str], tuple[RequestSpec, ...]] = {}


def _build(tok_path: str, spec: SweepSpec) -> tuple[RequestSpec, ...]:
    wl = spec.workload
    pairs = wl.datasets()
    counts = _shares(wl.num_prompts, [w for _, w in pairs])
    tokenizer: ChatTokenizer | None = None
    requests: list[RequestSpec] = []
    for index, ((ref, _), count) in enumerate(zip(pairs, counts, strict=True)):
        seed = wl.seed + 1009 * index
        if ref.kind is DatasetKind.RANDOM:
            ids = synthetic_requests(count, wl.input_len, wl.output_len, wl.vocab_size, seed, wl.range_ratio)
            requests += [RequestSpec(r.input_ids, r.max_new_tokens, "random") for r in ids]
            continue
        if tokenizer is None:
            tokenizer = load_tokenizer(tok_path, wl.vocab_size)
        conversations = _conversations(ref, count, seed)
        requests += _tokenize(conversations, count, seed, tokenizer, metric_name(ref), spec)
    random.Random(wl.seed).shuffle(requests)  # interleave the datasets through the stage
    return tuple(requests)


def _conversations(ref: DatasetRef, count: int, seed: int) -> list[Conversation]:
    if ref.kind is DatasetKind.GENERATED_CHAT:
        return generated_chat(count, seed)
    path = Path(ref.path)
    return load_sharegpt(path) if ref.kind is DatasetKind.SHAREGPT else load_jsonl(path)


def _tokenize(
    conversations: Sequence[Conversation],
    count: int,
    seed: int,
    tokenizer: ChatTokenizer,
    name: str,
    spec: SweepSpec,
) -> list[RequestSpec]:
    wl = spec.workload
    order = list(range(len(conversations)))
    random.Random(seed).shuffle(order)
    out = []
    for i in range(count):  # a dataset smaller than its share is cycled through
        conv = conversations[order[i % len(order)]]
        ids = tokenizer.encode_chat(conv.messages)[-wl.input_len :]
        wanted = conv.max_tokens or (tokenizer.count(conv.answer) if conv.answer else 0) or wl.output_len
        out.append(RequestSpec(tuple(ids), max(1, min(wanted, wl.output_len)), name))
    return out


def _shares(total: int, weights: Sequence[float]) -> list[int]:
    """``total`` split by weight (largest remainders), every dataset at least one request."""
    if total < len(weights):
        raise ValueError(f"num_prompts ({total}) is below the number of datasets ({len(weights)})")
    scale = sum(weights)
    exact = [total * w / scale for w in weights]
    counts = [max(1, int(x)) for x in exact]
    by_remainder = sorted(range(len(weights)), key=lambda i: exact[i] - int(exact[i]), reverse=True)
    for i in by_remainder[: max(0, total - sum(counts))]:
        counts[i] += 1
    while sum(counts) > total:
        counts[counts.index(max(counts))] -= 1
    return counts


def dataset_breakdown(
    concurrency: int, requests: Sequence[RequestSpec], outcomes: Sequence[RequestOutcome], duration_s: float
) -> tuple[DatasetMetrics, ...]:
    """Each dataset's requests of a stage: its acceptance and its share of the stage's throughput.

    A stage cycles its prompts until its minimum duration, so outcomes outnumber requests: each is
    counted under the dataset of the request it served (in sending order where it does not say)."""
    names = sorted({r.dataset for r in requests})

    def dataset_of(position: int, outcome: RequestOutcome) -> str:
        index = outcome.request_index if outcome.request_index is not None else position % len(requests)
        return requests[index].dataset

    out = []
    for name in names:
        mine = [o for i, o in enumerate(outcomes) if dataset_of(i, o) == name]
        m = stage_metrics(concurrency, mine, duration_s)
        out.append(
            DatasetMetrics(
                name=name,
                num_requests=m.num_requests,
                completed=m.completed,
                output_tok_per_s=m.output_tok_per_s,
                accept_length=m.accept_length,
                tpot_p50_ms=m.tpot_p50_ms,
            )
        )
    return tuple(out)
