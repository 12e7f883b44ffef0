"""Draws of a server that is running now, on another node, under this name or another.

On several nodes the sampler can draw a server while its twin (the same configuration, or one the engine
serves as the same server: `SameServer`) is still being measured elsewhere. Launching it would measure that
server twice at the cost of a whole node; it waits instead, asked but not launched, and is answered from
the twin's record once it settles, or launched after all when the twin measured nothing (its node died,
it was interrupted). A waiting draw holds no node and no budget; an interrupt closes and re-queues it like
any trial asked and not yet launched.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import optuna

from orchestrator.driver.loop.observers import Seen
from orchestrator.records import ServerConfig

Draw = tuple[optuna.Trial, ServerConfig]  # a trial asked of the study, and the configuration it drew


@dataclass
class Twins:
    server_of: Callable[[ServerConfig], ServerConfig]
    _waiting: dict[ServerConfig, list[Draw]] = field(default_factory=dict)
    # Draws whose twin measured nothing: launched before anything new is asked.
    released: list[Draw] = field(default_factory=list)

    def running(self, config: ServerConfig, in_flight: Iterable[ServerConfig]) -> bool:
        server = self.server_of(config)
        return any(self.server_of(other) == server for other in in_flight)

    def wait(self, trial: optuna.Trial, config: ServerConfig) -> None:
        self._waiting.setdefault(self.server_of(config), []).append((trial, config))

    def settled(
        self, config: ServerConfig, seen: Seen | None
    ) -> list[tuple[optuna.Trial, ServerConfig, Seen]]:
        """The twin `config` ended: the draws that waited for it, to answer from its record (`seen`, what
        measured the server); with none (it measured nothing) they go to `released`, to launch."""
        waiting = self._waiting.pop(self.server_of(config), [])
        if seen is None:
            self.released.extend(waiting)
            return []
        return [(trial, drawn, seen) for trial, drawn in waiting]

    def __len__(self) -> int:
        return sum(len(draws) for draws in self._waiting.values())
