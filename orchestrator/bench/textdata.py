"""Text datasets: reading ShareGPT and JSONL files into conversations.

A dataset is written ``random`` (token ids, no text), ``generated-chat`` (built in), ``sharegpt: PATH``
(a JSON list of ``{"conversations": [{"from": "human"|"gpt"|"system"|..., "value": ...}]}``, as
``sglang.bench_serving`` reads it: `SHAREGPT_SPEAKERS`; an item that cannot be used is skipped) or
``jsonl: PATH`` (one object per line, ``{"prompt": ...}`` or ``{"messages": [{"role", "content"}]}``,
optionally ``max_tokens``). Each item becomes a `Conversation` whose last message is the user's: that is
the prompt; the answer that followed it in the file, when there is one, sets the output length.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from orchestrator.errors import SpecsweepError


class DatasetError(SpecsweepError, ValueError):
    """A dataset that cannot be used; the message names the file, the line or item, and the fix."""


class Role(StrEnum):
    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"


@dataclass(frozen=True)
class Message:
    role: Role
    content: str


@dataclass(frozen=True)
class Conversation:
    """The turns up to (and including) the user's last one, and what came after it, if known."""

    messages: tuple[Message, ...]
    answer: str | None = None
    max_tokens: int | None = None


# Every speaker the ShareGPT files in use name (ShareGPT_V3_unfiltered_cleaned_split.json, which
# `sglang.bench_serving --dataset-name sharegpt` reads, has human, gpt, system, user, chatgpt, bard and
# bing turns), in lower case.
SHAREGPT_SPEAKERS: dict[str, Role] = {
    "human": Role.USER,
    "user": Role.USER,
    "gpt": Role.ASSISTANT,
    "chatgpt": Role.ASSISTANT,
    "bard": Role.ASSISTANT,
    "bing": Role.ASSISTANT,
    "assistant": Role.ASSISTANT,
    "model": Role.ASSISTANT,
    "system": Role.SYSTEM,
}


class Skip(StrEnum):
    """Why an item of a dataset file is left out."""

    NOT_A_CONVERSATION = "no conversation list"
    EMPTY = "empty conversation"
    TURN_WITHOUT_TEXT = "a turn without text"
    UNKNOWN_SPEAKER = "unknown speaker"
    NO_USER_TURN = "no user turn with text"
    TEMPLATE_REFUSED = "refused by the chat template"


@dataclass(frozen=True)
class LoadedDataset:
    """A file's usable conversations, and how many items were left out, for what."""

    conversations: tuple[Conversation, ...]
    skipped: tuple[tuple[str, int], ...] = ()  # (reason, count), most frequent first

    def summary(self) -> str:
        """``12 conversations, 3 skipped (2 empty conversation, 1 unknown speaker 'x')``."""
        n = len(self.conversations)
        kept = f"{n} conversation{'' if n == 1 else 's'}"
        total = sum(n for _, n in self.skipped)
        if not total:
            return kept
        return f"{kept}, {total} skipped ({', '.join(f'{n} {why}' for why, n in self.skipped)})"


class _Skips:
    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def add(self, reason: str) -> None:
        self.counts[str(reason)] = self.counts.get(str(reason), 0) + 1

    def sorted(self) -> tuple[tuple[str, int], ...]:
        return tuple(sorted(self.counts.items(), key=lambda kv: (-kv[1], kv[0])))


def load_sharegpt(path: Path) -> LoadedDataset:
    """Every usable conversation of a ShareGPT file, cut after its last user turn that has text.

    Read as ``sglang.bench_serving`` reads the file: an item that cannot be used (no turns, a turn
    without text, a speaker no role is known for, no user turn) is left out and counted, not a reason
    to refuse the file."""
    text = _read(path)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        if _json_lines(text):
            raise DatasetError(
                f"{path}: not a ShareGPT file (a JSON list) but one JSON object per line: give it as "
                f"'jsonl: {path}'"
            ) from None
        raise DatasetError(f"{path}: not valid JSON (line {err.lineno}: {err.msg})") from None
    if not isinstance(data, list):
        raise DatasetError(f"{path}: a ShareGPT file is a JSON list of {{'conversations': [...]}} objects")
    out: list[Conversation] = []
    skips = _Skips()
    for item in data:
        turns = _sharegpt_turns(item)
        if isinstance(turns, str):
            skips.add(turns)
            continue
        conversation = _cut_at_last_user(turns)
        if conversation is None:
            skips.add(Skip.NO_USER_TURN)
        else:
            out.append(conversation)
    return _non_empty(LoadedDataset(tuple(out), skips.sorted()), path)


def _sharegpt_turns(item: Any) -> list[Message] | str:
    """An item's turns as messages (assistant turns before the first user turn dropped, a speaker's
    consecutive turns joined, so that chat templates that need user and assistant to alternate take
    them), or why it cannot be used."""
    # bench_serving also reads the singular key some copies of the file use.
    turns = item.get("conversations", item.get("conversation")) if isinstance(item, dict) else None
    if not isinstance(turns, list):
        return Skip.NOT_A_CONVERSATION
    if not turns:
        return Skip.EMPTY
    messages: list[Message] = []
    asked = False
    for turn in turns:
        if not isinstance(turn, dict) or not isinstance(turn.get("value"), str):
            return Skip.TURN_WITHOUT_TEXT
        speaker = str(turn.get("from", ""))
        role = SHAREGPT_SPEAKERS.get(speaker.strip().lower())
        if role is None:
            return f"{Skip.UNKNOWN_SPEAKER} {speaker!r}"
        if role is Role.ASSISTANT and not asked:
            continue  # a split conversation that starts with the answer to a question left out
        asked = asked or role is Role.USER
        if messages and messages[-1].role is role:
            joined = "\n\n".join(t for t in (messages[-1].content, turn["value"]) if t.strip())
            messages[-1] = Message(role, joined)
        else:
            messages.append(Message(role, turn["value"]))
    return messages


def load_jsonl(path: Path) -> LoadedDataset:
    """One conversation per non-blank line; a malformed line is refused with its line number (a JSONL
    file is the user's own, written for the sweep), one without a user turn skipped and counted."""
    out = []
    skips = _Skips()
    for number, line in enumerate(_read(path).splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}, line {number}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as err:
            raise DatasetError(f"{where}: not valid JSON ({err.msg}); one JSON object per line") from None
        if not isinstance(obj, dict):
            raise DatasetError(f"{where}: expected a JSON object with 'prompt' or 'messages'")
        max_tokens = obj.get("max_tokens")
        if max_tokens is not None and (not isinstance(max_tokens, int) or max_tokens < 1):
            raise DatasetError(f"{where}: max_tokens must be a whole number of at least 1")
        conversation = _jsonl_conversation(obj, where)
        if conversation is None:
            skips.add(Skip.NO_USER_TURN)
        else:
            out.append(Conversation(conversation.messages, conversation.answer, max_tokens))
    return _non_empty(LoadedDataset(tuple(out), skips.sorted()), path)


def _json_lines(text: str) -> bool:
    """Whether every non-blank line of ``text`` is a JSON object (a JSONL file)."""
    lines = [line for line in text.splitlines() if line.strip()]
    try:
        return bool(lines) and all(isinstance(json.loads(line), dict) for line in lines)
    except json.JSONDecodeError:
        return False


def _jsonl_conversation(obj: dict[str, Any], where: str) -> Conversation | None:
    prompt = obj.get("prompt")
    if isinstance(prompt, str):
        if not prompt.strip():  # a user turn without text: skipped, as one in `messages` is
            return None
        return Conversation((Message(Role.USER, prompt),), _text_or_none(obj.get("answer")))
    messages = obj.get("messages")
    if not isinstance(messages, list):
        raise DatasetError(f"{where}: needs a string 'prompt' or a 'messages' list")
    parsed = []
    for m in messages:
        if not isinstance(m, dict) or not isinstance(m.get("content"), str):
            raise DatasetError(f"{where}: each message needs 'role' and a string 'content'")
        try:
            parsed.append(Message(Role(str(m.get("role"))), m["content"]))
        except ValueError:
            raise DatasetError(
                f"{where}: unknown role {m.get('role')!r} (use system, user or assistant)"
            ) from None
    return _cut_at_last_user(parsed)


def _cut_at_last_user(messages: list[Message]) -> Conversation | None:
    """The prompt ends at the last user turn with text; the assistant turn after it is the answer."""
    last = max((i for i, m in enumerate(messages) if m.role is Role.USER and m.content.strip()), default=-1)
    if last < 0:
        return None
    after = messages[last + 1] if last + 1 < len(messages) else None
    answer = after.content if after is not None and after.role is Role.ASSISTANT else None
    return Conversation(tuple(messages[: last + 1]), _text_or_none(answer))


def _text_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) and value.strip() else None


def _read(path: Path) -> str:
    if path.is_dir():
        files = sorted(p.name for p in path.iterdir() if p.suffix in (".json", ".jsonl") and p.is_file())
        inside = (
            f"name the file in it ({', '.join(files[:3])}{', ...' if len(files) > 3 else ''})"
            if files
            else ("it holds no .json or .jsonl file; name the dataset file itself")
        )
        raise DatasetError(f"{path} is a folder, not a dataset file; {inside}")
    if not path.exists():
        raise DatasetError(
            f"{path}: no such dataset file; fix the path (a relative one is read from the spec's folder)"
        )
    if not path.is_file():
        raise DatasetError(f"{path} is not a regular file; name the dataset file itself")
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise DatasetError(f"{path}: cannot be read as UTF-8 text: {err}") from None


def _non_empty(loaded: LoadedDataset, path: Path) -> LoadedDataset:
    if not loaded.conversations:
        raise DatasetError(
            f"{path}: the dataset is empty (no conversation with a user turn; {loaded.summary()}); add some"
        )
    return loaded
