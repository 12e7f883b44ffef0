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
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.bench.chatgen import generated_chat
from orchestrator.bench.metrics import stage_metrics
from orchestrator.bench.textdata import (
    DatasetError,
    LoadedDataset,
    Skip,
    load_jsonl,
    load_sharegpt,
)
from orchestrator.bench.tokenizer import ChatTokenizer, TemplateRefused, TokenizerMissing, load_tokenizer
from orchestrator.bench.workload import RequestSpec, synthetic_requests
from orchestrator.records import DatasetMetrics
from orchestrator.spec.dataset_ref import DatasetCounts, DatasetKind, DatasetRef
from orchestrator.spec.search import SpecError
from orchestrator.spec.sweep_spec import Backend, SweepSpec

if TYPE_CHECKING:
    from orchestrator.bench.client import RequestOutcome  # aiohttp: not loaded to check a spec

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
    except TokenizerMissing as err:  # the folder the tokenizer was read from is at fault
        raise SpecError(
            f"{'workload.tokenizer' if spec.workload.tokenizer else 'model.path'}: {err}"
        ) from None
    except (DatasetError, ValueError) as err:
        raise SpecError(f"workload.dataset: {err}") from None


def build_requests(spec: SweepSpec) -> tuple[RequestSpec, ...]:
    """The requests of every benchmark stage: the same for the same spec, on every node."""
    return _built(spec).requests


def workload_lines(spec: SweepSpec) -> list[str]:
    """One line per dataset for the console: its name and, for a file, the conversations kept and
    those skipped, by reason."""
    return list(_built(spec).lines)


def workload_counts(spec: SweepSpec) -> list[DatasetCounts]:
    """The same, as figures (for MLflow and the report)."""
    return list(_built(spec).counts)


@dataclass(frozen=True)
class _Built:
    requests: tuple[RequestSpec, ...]
    lines: tuple[str, ...]
    counts: tuple[DatasetCounts, ...]


def _built(spec: SweepSpec) -> _Built:
    # Keyed by the workload's JSON and the tokenizer (the spec itself is not hashable): a node that
    # runs several trials reads and tokenizes a dataset once.
    key = (spec.workload.model_dump_json(), tokenizer_path(spec))
    built = _BUILT.get(key)
    if built is None:
        built = _build(key[1], spec)
        _BUILT.clear()  # one workload per sweep: keep only the latest
        _BUILT[key] = built
    return built


_BUILT: dict[tuple[str, str], _Built] = {}


def _build(tok_path: str, spec: SweepSpec) -> _Built:
    wl = spec.workload
    pairs = wl.datasets()
    counts = _shares(wl.num_prompts, [w for _, w in pairs])
    tokenizer: ChatTokenizer | None = None
    requests: list[RequestSpec] = []
    lines: list[str] = []
    counts_of: list[DatasetCounts] = []
    for index, ((ref, _), count) in enumerate(zip(pairs, counts, strict=True)):
        seed = wl.seed + 1009 * index
        if ref.kind is DatasetKind.RANDOM:
            ids = synthetic_requests(count, wl.input_len, wl.output_len, wl.vocab_size, seed, wl.range_ratio)
            requests += [RequestSpec(r.input_ids, r.max_new_tokens, "random") for r in ids]
            lines.append(f"dataset {ref}: {count} requests")
            counts_of.append(DatasetCounts(metric_name(ref), lines[-1], count))
            continue
        if tokenizer is None:
            tokenizer = load_tokenizer(tok_path, wl.vocab_size)
        loaded = _conversations(ref, count, seed)
        tokenized, loaded = _tokenize(loaded, count, seed, tokenizer, metric_name(ref), spec)
        requests += tokenized
        shown = f"{ref.kind.value}: {Path(ref.path).name}" if ref.path else str(ref)
        lines.append(f"dataset {shown}: {count} requests from {loaded.summary()}")
        kept = len(loaded.conversations)
        counts_of.append(DatasetCounts(metric_name(ref), lines[-1], count, kept, loaded.skipped))
    random.Random(wl.seed).shuffle(requests)  # interleave the datasets through the stage
    return _Built(tuple(requests), tuple(lines), tuple(counts_of))


def _conversations(ref: DatasetRef, count: int, seed: int) -> LoadedDataset:
    if ref.kind is DatasetKind.GENERATED_CHAT:
        return LoadedDataset(tuple(generated_chat(count, seed)))
    path = Path(ref.path)
    return load_sharegpt(path) if ref.kind is DatasetKind.SHAREGPT else load_jsonl(path)


def _tokenize(
    loaded: LoadedDataset,
    count: int,
    seed: int,
    tokenizer: ChatTokenizer,
    name: str,
    spec: SweepSpec,
) -> tuple[list[RequestSpec], LoadedDataset]:
    """``count`` requests (a dataset smaller than its share is cycled through), and the dataset with
    the conversations the model's chat template refuses counted as skipped."""
    wl = spec.workload
    conversations = loaded.conversations
    order = list(range(len(conversations)))
    random.Random(seed).shuffle(order)
    out: list[RequestSpec] = []
    refused: set[int] = set()
    why = ""
    i = 0
    while len(out) < count and len(refused) < len(order):
        index = order[i % len(order)]
        i += 1
        if index in refused:
            continue
        conv = conversations[index]
        try:
            ids = tokenizer.encode_chat(conv.messages)[-wl.input_len :]
        except TemplateRefused as err:
            refused.add(index)
            why = str(err)
            continue
        wanted = conv.max_tokens or (tokenizer.count(conv.answer) if conv.answer else 0) or wl.output_len
        out.append(RequestSpec(tuple(ids), max(1, min(wanted, wl.output_len)), name))
    if refused:
        kept = tuple(c for j, c in enumerate(conversations) if j not in refused)
        skipped = dict(loaded.skipped)
        skipped[Skip.TEMPLATE_REFUSED.value] = len(refused)  # of those tried; the rest were not needed
        loaded = LoadedDataset(kept, tuple(sorted(skipped.items(), key=lambda kv: (-kv[1], kv[0]))))
    if not out:
        raise DatasetError(f"{name}: {why}, and every other one ({loaded.summary()}); use another dataset")
    return out, loaded


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
