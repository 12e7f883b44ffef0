"""The launches the answer reads, the configurations they group into, and the machines they ran on.

Machines of one kind differ by more than launches on one machine: the real pair's grid on five H100
machines measured the same server without speculation 47-58 % faster on the fifth than on the first,
while two launches of one tree on one machine differed by 0.2-7 %. Where a small target's decode step is
host overhead, the host sets the pace. So the spread between launches is pooled within a machine only
(`repeat_groups`), and two configurations that ran on a common machine are compared there
(`on_one_machine`), their launches elsewhere left out of that comparison and named.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from orchestrator.driver.answer.noise import StageTiming


@dataclass(frozen=True)
class Launch:
    """One launch that measured a figure the answer can use."""

    number: int
    config: str  # the configuration's label: launches of one configuration share it
    value: float  # its objective: the best stage's tok/s within the latency limits
    timing: StageTiming = field(default_factory=lambda: StageTiming(None, True))
    machine: str = ""  # its GPUs (`confirm.machine`); "" where unknown: taken as one machine


@dataclass(frozen=True)
class Group:
    """One configuration and what its launches measured, in launch order."""

    config: str
    numbers: tuple[int, ...]
    values: tuple[float, ...]
    nospec: bool = False  # the server without speculation
    estimate: float | None = None  # what ranks it among the others (`answer.ranking`); None: its median
    predicted: bool = False  # its estimate was shrunk toward the speculation model's prediction
    machines: tuple[str, ...] = ()  # each launch's machine, as `numbers`; () where unknown
    elsewhere: tuple[int, ...] = ()  # its launches on other machines, left out of a comparison on one

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    @property
    def representative(self) -> int:
        """The launch whose record gives the command and the memory account: the one whose value is the
        median (the lower middle one for an even count)."""
        order = sorted(range(len(self.values)), key=lambda i: self.values[i])
        return self.numbers[order[(len(order) - 1) // 2]]

    def name(self) -> str:
        if len(self.numbers) == 1:
            return f"trial {self.numbers[0]}"
        return "trials " + ", ".join(map(str, self.numbers))

    def subject(self) -> str:
        """The configuration as the subject of a sentence."""
        if self.nospec:
            return f"the server without speculation ({self.name()})"
        return self.name() if len(self.numbers) == 1 else f"the configuration of {self.name()}"

    def on(self, machine: str) -> Group:
        """Its launches on ``machine`` alone, the others named as left out."""
        keep = [i for i, m in enumerate(self.machines) if m == machine]
        return Group(
            self.config,
            tuple(self.numbers[i] for i in keep),
            tuple(self.values[i] for i in keep),
            nospec=self.nospec,
            machines=tuple(self.machines[i] for i in keep),
            elsewhere=tuple(n for n, m in zip(self.numbers, self.machines, strict=True) if m != machine),
        )


def group_launches(launches: Sequence[Launch]) -> list[Group]:
    """Every configuration, best median first; equal medians: more launches first, then the earliest."""
    by_config: dict[str, list[Launch]] = {}
    for launch in sorted(launches, key=lambda x: x.number):
        by_config.setdefault(launch.config, []).append(launch)
    groups = [
        Group(
            config,
            tuple(x.number for x in ls),
            tuple(x.value for x in ls),
            machines=tuple(x.machine for x in ls),
        )
        for config, ls in by_config.items()
    ]
    groups.sort(key=lambda g: (-g.median, -len(g.numbers), g.numbers[0]))
    return groups


def repeat_groups(groups: Iterable[Group]) -> list[tuple[float, ...]]:
    """Each configuration's figures machine by machine: what the launch-to-launch spread is pooled over
    (`noise.pooled_spread`), so that two launches on two machines add nothing to it."""
    out: list[tuple[float, ...]] = []
    for group in groups:
        machines = group.machines or ("",) * len(group.values)
        by_machine: dict[str, list[float]] = {}
        for machine, value in zip(machines, group.values, strict=True):
            by_machine.setdefault(machine, []).append(value)
        out.extend(tuple(values) for values in by_machine.values())
    return out


def shared_machine(a: Group, b: Group) -> str | None:
    """The machine to compare ``a`` and ``b`` on: one both ran on, when either ran elsewhere too (with
    every launch on one machine there is nothing to leave out). Of several, the one with the most of
    their launches, then the one of the latest launch; None when they never shared a machine."""
    both = [*zip(a.machines, a.numbers, strict=True), *zip(b.machines, b.numbers, strict=True)]
    common = set(a.machines) & set(b.machines)
    if not common or len({m for m, _ in both}) == 1:
        return None
    return max(common, key=lambda m: (sum(x == m for x, _ in both), max(n for x, n in both if x == m)))


def on_one_machine(a: Group, b: Group) -> tuple[Group, Group]:
    """``a`` and ``b`` as they compare: on the machine they share (`shared_machine`), else as they are
    (their gap then includes what differs between machines: `answer.nodes` says so)."""
    machine = shared_machine(a, b)
    return (a, b) if machine is None else (a.on(machine), b.on(machine))


def left_out(*groups: Group) -> str:
    """The launches a comparison on one machine left out, in words ('' when none)."""
    numbers = sorted(n for g in groups for n in g.elsewhere)
    if not numbers:
        return ""
    which = f"trial {numbers[0]}" if len(numbers) == 1 else "trials " + ", ".join(map(str, numbers))
    verb = "is" if len(numbers) == 1 else "are"
    return (
        f"compared on the machine both ran on ({which} ran elsewhere and {verb} left out: machines of one "
        "kind differ by more than launches on one)"
    )
