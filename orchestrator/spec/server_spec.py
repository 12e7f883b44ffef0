"""The spec's server section: the fixed flags every launch passes as given, the server's host, interpreter
and environment, and which flags hold secrets. Its flags are parsed once (`spec.fixed_flags`) and read
typed from `ServerSpec.fixed` by everything that needs one of them."""

from __future__ import annotations

import json
import shlex
from typing import Any

from pydantic import Field, field_validator, model_validator

from orchestrator.secrets import MIN_LEN as SECRET_MIN_LEN
from orchestrator.secrets import secret_values
from orchestrator.spec.fixed_flags import FixedFlags, parse_fixed
from orchestrator.spec.search import SpecModel


class ServerSpec(SpecModel):
    flags: list[str] = Field(default_factory=list, description="fixed SGLang flags, as an argument list")
    host: str = "127.0.0.1"
    python: str = Field(default="", description="interpreter on the nodes; empty = the worker's own")
    env: dict[str, str] = Field(default_factory=dict)
    enable_metrics: bool = False
    secret_flags: list[str] = Field(
        default_factory=list,
        description="flags in `flags` whose values are secrets, besides --api-key, --admin-api-key, "
        "--ssl-keyfile-password and --hf-token: masked and scrubbed from every log, artifact and record",
    )

    @field_validator("flags", mode="before")
    @classmethod
    def _not_a_string(cls, value: Any) -> Any:
        # A shell string is ambiguous (quotes, spaces in values): the README asks for a list, and shows
        # the list this string would have been, so the fix is a copy.
        if isinstance(value, str):
            try:
                words = json.dumps(shlex.split(value))
            except ValueError:
                words = '["--flag", "value", ...]'
            raise ValueError(f"a list of arguments, not a shell string; write flags: {words}")
        return value

    @field_validator("flags")
    @classmethod
    def _readable(cls, flags: list[str]) -> list[str]:
        parse_fixed(flags)  # a ValueError names the word and the fix; pydantic prefixes `server.flags`
        return flags

    @field_validator("secret_flags")
    @classmethod
    def _dashed(cls, names: list[str]) -> list[str]:
        for name in names:
            if not name.startswith("--") or "=" in name:
                raise ValueError(f"{name!r}: name the flag as SGLang spells it, e.g. --api-key")
        return names

    @model_validator(mode="after")
    def _secrets_long_enough(self) -> ServerSpec:
        # A one-letter "secret" would be masked in every word of every log.
        for value in secret_values(self.flags, self.secret_flags):
            if len(value) < SECRET_MIN_LEN:
                raise ValueError(
                    f"flags: a secret flag's value is shorter than {SECRET_MIN_LEN} characters; "
                    "use a real credential"
                )
        return self

    def secrets(self) -> tuple[str, ...]:
        return secret_values(self.flags, self.secret_flags)

    @property
    def fixed(self) -> FixedFlags:
        """The flags, parsed (once: `fixed_flags.parse_fixed` keeps each list's parse)."""
        return parse_fixed(self.flags)

    def owned_flag(self, owned: frozenset[str]) -> str | None:
        """The first of `flags` that the engine's trials set themselves (None if none is)."""
        return next((o.name for o in self.fixed.options if o.name in owned), None)
