"""SGLang's native HTTP API as the benchmark client speaks it: `/generate`'s bodies and answers.

A request sends ``input_ids`` and greedy ``sampling_params`` that ignore EOS, so every request generates
exactly the tokens asked for. A streamed answer is server-sent events: ``data: {json}`` lines, then
``data: [DONE]``.

Counting new tokens: SGLang 0.5.17 sends the *cumulative* ``output_ids`` in every chunk, so a long
output costs O(n^2) bytes of JSON. Parsing all of it would let the client's CPU, not the server, set
the measured throughput, so the hot path parses only the small ``meta_info`` object and takes
``completion_tokens`` from it (the count so far, right whether ids are cumulative or incremental).
Only a chunk without it is parsed whole.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from orchestrator.engines.api import Endpoints, StreamEnd
from orchestrator.records import Margin

# SGLang's native API. /server_info is 0.5.9's name for /get_server_info (0.5.17 deprecates the old one).
SGLANG_ENDPOINTS = Endpoints(
    generate="/generate",
    health="/health",
    flush_cache="/flush_cache",
    server_info=("/server_info", "/get_server_info"),
)

_META_KEY = b'"meta_info":'
_DECODER = json.JSONDecoder()


class SglangStreamReader:
    """Folds one streamed `/generate` answer's lines into its token count and its last ``meta_info``."""

    __slots__ = ("done", "error", "meta")

    def __init__(self) -> None:
        self.done = False
        self.error = ""
        self.meta: dict[str, Any] | None = None

    def tokens(self, line: bytes, count: int) -> int | None:
        """One SSE line (``data: {json}``, ``data: [DONE]``; blank or other lines say nothing)."""
        if not line.startswith(b"data:"):
            return None
        payload = line[5:].strip()
        if payload == b"[DONE]":
            self.done = True
            return None
        meta: Any = None
        at = payload.rfind(_META_KEY)
        if at >= 0:
            try:
                meta, _ = _DECODER.raw_decode(payload[at + len(_META_KEY) :].decode().lstrip())
            except ValueError:
                meta = None
        if isinstance(meta, dict):
            total = meta.get("completion_tokens")
            if isinstance(total, int) and not isinstance(total, bool):
                self.meta = meta
                return total
        return self._tokens_from_whole_chunk(payload, count)

    def _tokens_from_whole_chunk(self, payload: bytes, count: int) -> int | None:
        """Slow path: a chunk without ``meta_info.completion_tokens`` (an error, or another server)."""
        try:
            obj = json.loads(payload)
        except ValueError:
            self.error = self.error or f"unparseable chunk: {payload[:100]!r}"
            return None
        if not isinstance(obj, dict):
            self.error = self.error or f"unexpected chunk: {payload[:100]!r}"
            return None
        if "error" in obj:
            self.error = self.error or _error_text(obj["error"])
            return None
        if isinstance(obj.get("meta_info"), dict):
            self.meta = obj["meta_info"]
        ids = obj.get("output_ids")
        if not isinstance(ids, list) or not ids:
            return None
        # Cumulative ids (0.5.17) only grow; a chunk no longer than the count so far must hold new ids only.
        return len(ids) if len(ids) > count else count + len(ids)

    def end(self) -> StreamEnd:
        """What the last ``meta_info`` said: ``finish_reason`` (``{"type": ..., "message": ...}``), the
        prompt's tokens, the verify steps and the retractions."""
        meta = self.meta or {}
        finish = meta.get("finish_reason")
        finish_type = str(finish.get("type", "")) if isinstance(finish, dict) else str(finish or "")
        message = finish.get("message", "") if isinstance(finish, dict) else ""
        verify = meta.get("spec_verify_ct")
        retractions = meta.get("num_retractions")
        prompt = meta.get("prompt_tokens")
        return StreamEnd(
            done=self.done,
            finished=finish is not None,
            finish_reason=finish_type,
            abort_message=f"{message}",
            prompt_tokens=prompt if isinstance(prompt, int) else None,
            spec_verify_ct=verify if isinstance(verify, int) else None,
            num_retractions=retractions if isinstance(retractions, int) else 0,
            error=self.error,
        )


def _error_text(error: Any) -> str:
    """SGLang streams ``{"error": {"message": ...}}`` when a request fails after the stream began."""
    if isinstance(error, dict) and "message" in error:
        return str(error["message"])
    return str(error)


def _sampling(max_new_tokens: int) -> dict[str, Any]:
    return {"max_new_tokens": max_new_tokens, "temperature": 0, "ignore_eos": True}


def _margin(top: Any, emitted: int | None) -> Margin | None:
    """One position's two best ``[logprob, token_id, text]`` entries as a margin over the token the
    server did not emit; None when malformed.

    The runner-up is named by the emitted token, not by the list's order: at an exact tie the top-k
    list and the greedy sampler may break it differently (seen on an H100: 8009 listed first, 260 emitted).
    """
    if not isinstance(top, list) or len(top) < 2:
        return None
    try:
        entries = sorted(((float(e[0]), int(e[1])) for e in top[:2]), key=lambda e: -e[0])
    except (TypeError, ValueError, IndexError):
        return None
    chosen = next((e for e in entries if e[1] == emitted), entries[0])
    other = next(e for e in entries if e is not chosen)
    return Margin(max(chosen[0] - other[0], 0.0), other[1])


@dataclass(frozen=True)
class SglangApi:
    """`engines.api.ServerApi` for SGLang's native `/generate` (and the simulated node, which serves it)."""

    endpoints: Endpoints = SGLANG_ENDPOINTS

    def stream_body(self, input_ids: Sequence[int], max_new_tokens: int) -> bytes:
        payload = {"input_ids": list(input_ids), "sampling_params": _sampling(max_new_tokens), "stream": True}
        return json.dumps(payload, separators=(",", ":")).encode()

    def stream_reader(self) -> SglangStreamReader:
        return SglangStreamReader()

    def greedy_body(
        self, input_ids: Sequence[int], max_new_tokens: int, *, scored: bool = False
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"input_ids": list(input_ids), "sampling_params": _sampling(max_new_tokens)}
        if scored:
            # The top two log-probabilities of each output position (``logprob_start_len: -1``: output
            # tokens only), so that a difference at a near tie can be told from a lossy draft. Asked of
            # the server without speculation alone: log-probabilities through EAGLE-3's verify have
            # failed in SGLang (sgl-project/sglang#17349), and only the baseline's margins are read.
            body.update(return_logprob=True, top_logprobs_num=2, logprob_start_len=-1)
        return body

    def greedy_margins(self, answer: Any) -> tuple[Margin | None, ...] | None:
        """``meta_info.output_top_logprobs``: per output position a list of ``[logprob, token_id,
        text_or_null]``, best first."""
        meta = answer.get("meta_info") if isinstance(answer, dict) else None
        tops = meta.get("output_top_logprobs") if isinstance(meta, dict) else None
        if not isinstance(tops, list):
            return None
        ids = self.greedy_ids(answer) or ()
        return tuple(_margin(top, ids[i] if i < len(ids) else None) for i, top in enumerate(tops))

    def greedy_ids(self, answer: Any) -> tuple[int, ...] | None:
        if not isinstance(answer, dict) or not isinstance(answer.get("output_ids"), list):
            return None
        return tuple(int(i) for i in answer["output_ids"])

    def accept_length(self, info: Mapping[str, Any]) -> float | None:
        """``internal_states[0].avg_spec_accept_length``: the average since the last /flush_cache
        (warm-up included); None without speculation."""
        states = info.get("internal_states")
        if not isinstance(states, list) or not states or not isinstance(states[0], dict):
            return None
        value = states[0].get("avg_spec_accept_length")
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        return None


SGLANG_API = SglangApi()
