"""Draws of a server that is running now, on another node, under this name or another.

On several nodes the sampler can draw a server while its twin (the same configuration, or one the engine
serves as the same server: `SameServer`) is still being measured elsewhere. Launching it would measure that
server twice at the cost of a whole node; it waits instead, asked but not launched, and is answered from
the twin's record once it settles, or launched after all when the twin measured nothing (pruned, failed,
its node died: then the draw is the retry, and the lost twin is not re-queued as well). A waiting draw holds
no node and no budget. One still unlaunched when the driver stops (the budget spent, Ctrl-C, kill -9) is
closed, never re-queued: it is a sampler's draw, not a configuration anyone asked for, and a re-queued
trial would be launched even where its server was measured.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import optuna

from orchestrator.driver.loop.observers import Seen
from orchestrator.records import ServerConfig

Draw = tuple[optuna.Trial, ServerConfig]  # a trial asked of the study, and the configuration it drew
Answer = tuple[optuna.Trial, ServerConfig, Seen]  # a waiting draw, and the record that answers it


@dataclass
class Twins:
    server_of: Callable[[ServerConfig], ServerConfig]
    waited: int = 0  # draws that ever waited: counted with the repeats against the sampler's repeat limit
    _waiting: dict[ServerConfig, list[Draw]] = field(default_factory=dict, init=False)
    _released: list[Draw] = field(default_factory=list, init=False)

    def running(self, config: ServerConfig, in_flight: Iterable[tuple[int, ServerConfig]]) -> int | None:
        """The number of the trial in flight that runs `config`'s server, if one does."""
        server = self.server_of(config)
        return next((number for number, other in in_flight if self.server_of(other) == server), None)

    def wait(self, trial: optuna.Trial, config: ServerConfig) -> None:
        self.waited += 1
        self._waiting.setdefault(self.server_of(config), []).append((trial, config))

    def waiting_on(self, config: ServerConfig) -> bool:
        return bool(self._waiting.get(self.server_of(config)))

    def settled(self, config: ServerConfig, seen: Seen | None) -> list[Answer]:
        """The twin `config` ended: the draws that waited for it, to answer from its record (`seen`, what
        measured the server); with none (it measured nothing) they are released, to launch."""
        waiting = self._waiting.pop(self.server_of(config), [])
        if seen is None:
            self._released.extend(waiting)
            return []
        return [(trial, drawn, seen) for trial, drawn in waiting]

    def next_released(self) -> Draw | None:
        """A draw whose twin measured nothing, to launch before anything new is asked."""
        return self._released.pop(0) if self._released else None

    def drain(self) -> list[Draw]:
        """Every draw not launched yet, waiting or released, forgotten here: the driver is stopping."""
        draws = [draw for waiting in self._waiting.values() for draw in waiting] + self._released
        self._waiting.clear()
        self._released.clear()
        return draws
