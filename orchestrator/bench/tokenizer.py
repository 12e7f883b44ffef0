"""Turning a conversation into the token ids the benchmark sends.

On a real server the ids come from the model's own tokenizer and chat template
(``transformers.AutoTokenizer`` from a local folder, offline), so the client measures exactly what a
user's request would cost. ``transformers`` stays an optional dependency: it is imported only here and
only for that case.

The simulated node has no vocabulary, so a simulated sweep without a tokenizer folder uses
`BuiltinTokenizer`: words and punctuation get stable ids by hashing into the profile's vocabulary, and
a chat template of role-marker ids wraps each turn. The simulated node needs only what real text has
and random ids lack (realistic token counts, repeated words, the template), not a real vocabulary, so a
dependency-free tokenizer is enough there and keeps the demo install small.
"""

from __future__ import annotations

import logging
import re
import warnings
import zlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

from orchestrator.bench.textdata import DatasetError, Message, Role

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")

log = logging.getLogger(__name__)


class TokenizerMissing(DatasetError):
    """The tokenizer's folder is not there or holds no tokenizer: the fault of the field it was read from
    (workload.tokenizer, else model.path), not of the dataset."""


class TemplateRefused(DatasetError):
    """The model's chat template raises on a conversation (e.g. one whose roles do not alternate)."""


class _IntoLog(logging.Filter):
    """Takes a record of ``transformers`` off its own stderr handler and into this module's log."""

    def filter(self, record: logging.LogRecord) -> bool:
        log.info("transformers: %s", record.getMessage())
        return False


_INTO_LOG = _IntoLog()


@contextmanager
def _transformers_into_log() -> Iterator[None]:
    """transformers writes notices to stderr a user cannot act on: "PyTorch was not found" (a client
    needs only the tokenizer), and "Token indices sequence length is longer than the specified maximum
    sequence length" for a long conversation, which the benchmark cuts to ``input_len`` after encoding.
    Around loading and encoding they go to the log instead (shown with ``-v``), as its warnings do."""
    hf = logging.getLogger("transformers")
    # The logger's own filter catches what is logged on "transformers" itself (the import-time notice,
    # before transformers adds its handler); a handler's filter what its modules' loggers pass up.
    targets: list[logging.Filterer] = [hf, *hf.handlers]
    for target in targets:
        target.addFilter(_INTO_LOG)
    # Under CI=true transformers lets its records propagate to the root logger too (for pytest's
    # capture), where no filter of ours stands: keep them on its own handlers while we listen.
    propagate, hf.propagate = hf.propagate, False
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yield
        for w in caught:
            log.info("transformers: %s", w.message)
    finally:
        hf.propagate = propagate
        for target in [hf, *hf.handlers]:
            target.removeFilter(_INTO_LOG)


class ChatTokenizer(Protocol):
    name: str

    def encode_chat(self, messages: Sequence[Message]) -> list[int]:
        """The prompt's ids: every turn in the chat template, ending with the assistant's cue."""
        ...

    def count(self, text: str) -> int:
        """Tokens in a plain text (an answer), without any template."""
        ...


_WORD = re.compile(r"\w+|[^\w\s]")
_SPECIAL = {"bos": 1, Role.SYSTEM: 2, Role.USER: 3, Role.ASSISTANT: 4, "end": 5}
_RESERVED = 16  # ids below this are the template's; words hash above them


class BuiltinTokenizer:
    """Word-level ids by CRC32 into ``[16, vocab_size)``; the same word is always the same id."""

    name = "builtin"

    def __init__(self, vocab_size: int) -> None:
        if vocab_size <= _RESERVED * 2:
            raise ValueError(f"vocab_size must be above {_RESERVED * 2} for the built-in tokenizer")
        self.vocab_size = vocab_size

    def _ids(self, text: str) -> list[int]:
        span = self.vocab_size - _RESERVED
        return [_RESERVED + zlib.crc32(w.lower().encode()) % span for w in _WORD.findall(text)]

    def encode_chat(self, messages: Sequence[Message]) -> list[int]:
        ids = [_SPECIAL["bos"]]
        for m in messages:
            ids += [_SPECIAL[m.role], *self._ids(m.content), _SPECIAL["end"]]
        return [*ids, _SPECIAL[Role.ASSISTANT]]

    def count(self, text: str) -> int:
        return len(_WORD.findall(text))


class HfTokenizer:
    """The model's tokenizer and chat template, loaded from a local folder with no network access."""

    def __init__(self, path: str) -> None:
        folder = Path(path)
        if not folder.exists():
            raise TokenizerMissing(
                f"{path} does not exist on this machine, and a text dataset needs the model's tokenizer "
                "here (the driver tokenizes the prompts): copy the model (or its tokenizer files) here and "
                "set workload.tokenizer to that folder, or use dataset: random"
            )
        if not any((folder / f).is_file() for f in TOKENIZER_FILES):
            raise TokenizerMissing(
                f"{path} has no tokenizer ({', '.join(TOKENIZER_FILES)}), and a text dataset needs the "
                "model's tokenizer: set workload.tokenizer to a folder that has one, or use dataset: random"
            )
        with _transformers_into_log():
            try:
                from transformers import AutoTokenizer
            except ImportError:
                raise DatasetError(
                    "a text dataset on this backend needs the 'transformers' package to read the model's "
                    "tokenizer: pip install 'specsweep[text]', or use dataset: random"
                ) from None
            try:
                self._tok: Any = AutoTokenizer.from_pretrained(path, local_files_only=True)
            except Exception as err:  # a broken tokenizer folder: many exception types, one message
                raise DatasetError(f"{path}: the tokenizer cannot be loaded: {err}") from None
        self.name = str(path)

    def encode_chat(self, messages: Sequence[Message]) -> list[int]:
        turns = [{"role": m.role.value, "content": m.content} for m in messages]
        with _transformers_into_log():
            if getattr(self._tok, "chat_template", None):
                try:
                    ids = self._tok.apply_chat_template(turns, tokenize=True, add_generation_prompt=True)
                except Exception as err:  # the template's own exception (jinja2's), raised on purpose
                    raise TemplateRefused(f"the chat template refuses the conversation: {err}") from None
                # Newer transformers may hand back a BatchEncoding rather than a plain list.
                return list(ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids)
            # No template: the turns one after another, as a completion model would see them.
            text = "\n".join(f"{m.role.value}: {m.content}" for m in messages) + "\nassistant:"
            return list(self._tok.encode(text))

    def count(self, text: str) -> int:
        with _transformers_into_log():
            return len(self._tok.encode(text, add_special_tokens=False))


def load_tokenizer(path: str, vocab_size: int) -> ChatTokenizer:
    """The tokenizer in ``path``, or the built-in one when ``path`` is empty."""
    if not path:
        return BuiltinTokenizer(vocab_size)
    return HfTokenizer(path)
