"""Counts in words: "1 trial", "3 trials", so that no console line reads "1 trials"."""

from __future__ import annotations


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """`n` and the noun, singular for exactly one (``plural`` where adding "s" is wrong)."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"
