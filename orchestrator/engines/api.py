"""How the benchmark client speaks an engine's HTTP API: its paths, the bodies it sends, how answers read.

The client (`bench/`) sends requests, times them and counts tokens; what a request looks like on the
wire and what an answer says are the engine's (`Engine.api`, a `ServerApi`). SGLang's native `/generate`
is `engines.sglang.wire`; another engine brings its own, and the client's timing stays one code.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from orchestrator.records import Margin

if TYPE_CHECKING:
    import aiohttp


@dataclass(frozen=True)
class Endpoints:
    """The paths of the engine's HTTP API the benchmark client calls."""

    generate: str  # POST, streamed
    health: str  # GET, 200 once the server serves
    flush_cache: str  # POST, between stages
    server_info: tuple[str, ...]  # GET, tried in order: the first that answers 200 wins

    def url(self, base_url: str, path: str) -> str:
        return base_url.rstrip("/") + path


@dataclass(frozen=True)
class StreamEnd:
    """What a streamed answer said of itself once it ended, in the client's words."""

    done: bool = False  # the stream's own end-of-stream line was read
    finished: bool = False  # the server gave a finish reason
    finish_reason: str = ""  # "length", "stop", "abort" (the server gave the request up), or ""
    abort_message: str = ""  # the server's words for an aborted request
    prompt_tokens: int | None = None  # as the server counted them; None: it did not say
    spec_verify_ct: int | None = None  # verify steps, when speculation is on
    num_retractions: int = 0  # times the server retracted the request for lack of KV cache
    error: str = ""  # the first error the stream itself carried


class StreamReader(Protocol):
    """Reads one streamed answer, a line at a time (each line without its newline)."""

    def tokens(self, line: bytes, count: int) -> int | None:
        """The output tokens the answer holds once ``line`` is read (``count``: those counted so far);
        None when the line says nothing of them."""
        ...

    def end(self) -> StreamEnd: ...


class ServerApi(Protocol):
    """The engine's HTTP API as the benchmark client speaks it."""

    @property
    def endpoints(self) -> Endpoints: ...

    def stream_body(self, input_ids: Sequence[int], max_new_tokens: int) -> bytes:
        """A streamed greedy request for exactly ``max_new_tokens`` (no early stop), serialized."""
        ...

    def stream_reader(self) -> StreamReader:
        """A reader for one answer to `stream_body`."""
        ...

    def greedy_body(
        self, input_ids: Sequence[int], max_new_tokens: int, *, scored: bool = False
    ) -> dict[str, Any]:
        """One greedy request, not streamed (the lossless check's); ``scored`` (the baseline's, without
        speculation) also asks, where the engine can, for the top two log-probabilities of every output
        position (`greedy_margins`)."""
        ...

    def greedy_margins(self, answer: Any) -> tuple[Margin | None, ...] | None:
        """Per output position of an answer to `greedy_body`, the top-1 minus top-2 log-probability
        and the second-choice token (None at a position it did not score); None when the answer holds
        no log-probabilities (the lossless check then judges every difference as lossy)."""
        ...

    def greedy_ids(self, answer: Any) -> tuple[int, ...] | None:
        """The output ids of an answer to `greedy_body`; None when it holds none."""
        ...

    def accept_length(self, info: Mapping[str, Any]) -> float | None:
        """The server's own average accept length, from its server info; None when it gives none."""
        ...


def describe_error(exc: BaseException, timeout: aiohttp.ClientTimeout) -> str:
    """One line for a failed request: what was raised, or how long the server sent nothing (a
    timeout's own text is empty; the flush sets only a total timeout, the stream a read timeout)."""
    if isinstance(exc, TimeoutError) and not str(exc):
        waited = timeout.sock_read if timeout.sock_read is not None else timeout.total
        return f"no data from the server for {waited:g} s"
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
