"""What SGLang declares before any of its code loads: the flags that set the searched values, as each
SGLang version spells them, the flags a trial owns, those of its fixed flags the driver reads typed,
which configurations it serves as one server, and the values it sets itself whatever is asked.

The spec checks a user's fixed flags against these (`spec.engine_catalog`, which reads this module) before
any GPU is claimed, so it is a leaf: it imports only the engine-neutral names of the searched values
(`config.fields`) and the shape of a declaration (`spec.engine_space`), and stands on the lowest floor
although it lives in SGLang's folder. SGLang's command line (`engines.sglang.command`) and its search space
(`engines.sglang.space`) read their spellings here.
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.config.fields import SearchedField
from orchestrator.spec.engine_space import FlagReading, Forced, RuleKind, SameServer


@dataclass(frozen=True)
class FieldFlag:
    """How SGLang sets one searched value."""

    flag: str  # the oldest spelling SGLang takes
    renamed: tuple[tuple[int, ...], str] | None = None  # (first version, new spelling)
    extra_flags: tuple[str, ...] = ()  # flags that come with it (the adaptive tiers' config file)

    def at(self, version: tuple[int, ...]) -> str:
        """The spelling of ``version``."""
        if self.renamed is not None and version >= self.renamed[0]:
            return self.renamed[1]
        return self.flag

    @property
    def newest(self) -> str:
        return self.renamed[1] if self.renamed is not None else self.flag

    @property
    def spellings(self) -> tuple[str, ...]:
        """Every spelling on any SGLang version, and the flags that come with it."""
        return (self.flag, *((self.renamed[1],) if self.renamed else ()), *self.extra_flags)


FIELD_FLAGS: dict[SearchedField, FieldFlag] = {
    SearchedField.MEM_FRACTION_STATIC: FieldFlag("--mem-fraction-static"),
    # 0.5.14 split the option per phase and kept the old name as a deprecated alias; 0.5.23 dropped it
    # (an ambiguous prefix now), so the new name is used wherever it exists.
    SearchedField.CUDA_GRAPH_MAX_BS: FieldFlag(
        "--cuda-graph-max-bs", renamed=((0, 5, 14), "--cuda-graph-max-bs-decode")
    ),
    SearchedField.MAX_RUNNING_REQUESTS: FieldFlag("--max-running-requests"),
    SearchedField.SPECULATIVE_NUM_STEPS: FieldFlag("--speculative-num-steps"),
    SearchedField.SPECULATIVE_EAGLE_TOPK: FieldFlag("--speculative-eagle-topk"),
    SearchedField.SPECULATIVE_NUM_DRAFT_TOKENS: FieldFlag("--speculative-num-draft-tokens"),
    SearchedField.SPECULATIVE_ADAPTIVE: FieldFlag(
        "--speculative-adaptive", extra_flags=("--speculative-adaptive-config",)
    ),
}

SEARCHED_FLAGS: frozenset[str] = frozenset(s for f in FIELD_FLAGS.values() for s in f.spellings)

# The flags the sweep sets: a fixed flag may not set them, or the trial would not be what the study thinks
# it measured.
OWNED_FLAGS: frozenset[str] = SEARCHED_FLAGS | {
    "--model-path",
    "--model",
    "--tp-size",
    "--tensor-parallel-size",
    "--host",
    "--port",
    "--speculative-algorithm",
    "--speculative-draft-model-path",
    "--speculative-draft-model",
}

# Where SGLang's fixed flags carry what the driver reads typed: the prefill chunk and graphs, the KV dtype
# (the memory prior) and the API key (the benchmark client).
READING = FlagReading(
    chunked_prefill_size="--chunked-prefill-size",
    kv_cache_dtype="--kv-cache-dtype",
    api_key="--api-key",
    prefill_graphs_off=(("--cuda-graph-backend-prefill", "disabled"), ("--disable-cuda-graph", None)),
)

# SGLang captures decode graphs up to its request pool: its list goes up to the graph batch, which it adds
# where the list lacks it, and `get_batch_sizes_to_capture` drops the sizes above `max_running_requests`,
# adding the pool's own size when it dropped any. So every graph batch at or above max running captures the
# same graphs, and is one server, whatever max running is (on 0.5.17, under max running 100, graph bs 100
# and 256 both captured 96 and 100: tests/fixtures/sglang/0.5.17/capture-pools/).
SAME_SERVER: tuple[SameServer, ...] = (
    SameServer(
        SearchedField.CUDA_GRAPH_MAX_BS.value,
        RuleKind.CAPPED,
        at=SearchedField.MAX_RUNNING_REQUESTS.value,
    ),
)

# EAGLE with top-k 1 drafts a chain: SGLang overrides the draft tokens asked with steps + 1 (with a
# warning), so a configuration records what it will run, and two asks of one chain are one configuration.
FORCED: tuple[Forced, ...] = (
    Forced(
        SearchedField.SPECULATIVE_NUM_DRAFT_TOKENS.value,
        base=SearchedField.SPECULATIVE_NUM_STEPS.value,
        plus=1.0,
        when=SearchedField.SPECULATIVE_EAGLE_TOPK.value,
        equals=1.0,
    ),
)
