"""The real sweep driver (`Sweep.run`) with Ray replaced by noisy, paid oracle launches.

`Sweep.run` asks, predicts, skips, submits, reads stage reports, prunes, tells and records through two
module-level names in `orchestrator.study`: `ray` and `cluster`. For the length of one run they are
swapped for the stand-ins below, which answer at once: a "submitted" trial is a launch drawn from the
benchmark's `Launcher` (the oracle's stages with a real node's noise), its stages are reported one at a
time through the event feed, and it runs the next stage only if the driver says so, as a trial on a node
does. Everything the driver decides is its own code, unchanged; when it starts to need more of Ray than
this, the stand-ins fail loudly (AttributeError). This file is the only place that knows how the driver
reaches Ray: when the product grows an executor interface, an oracle executor replaces this patching.

The GPU-hour budget is the product's own time budget: once the launches have spent it, the driver's
deadline is set to the past, so `Sweep.run` starts nothing new and returns, as on a real cluster.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

from optuna.storages import InMemoryStorage

import orchestrator.study as study_module
from benchmarks.noise import Launcher
from benchmarks.oracle import Evaluation
from orchestrator.records import TrialResult, TrialStatus
from orchestrator.spec import SweepSpec
from orchestrator.study import Sweep, objective_value, open_study
from orchestrator.tracking import Tracker, TrialRecord
from orchestrator.trial import TrialRequest
from orchestrator.trial_events import StageReport

NODE_ID = "oracle-node"


class TrialRef:
    """One submitted trial: its drawn launch and how far through its stages the driver has let it go."""

    def __init__(self, number: int, evaluation: Evaluation, on_done: Callable[[TrialRef], None]) -> None:
        self.number = number
        self.evaluation = evaluation
        self.step = 0  # the next stage to report
        self.reported = False
        self.stages_run = 0
        self.done = not evaluation.stages  # a failed start-up has nothing to report
        self._on_done = on_done
        self._paid = False

    def result(self) -> TrialResult:
        result = self.evaluation.result(self.stages_run, node_id=NODE_ID)
        if not self._paid:
            self._paid = True
            self._on_done(self)
        return result


class _Arrivals:
    """The feed's pending 'ref': ready while some trial has a stage to report."""

    def __init__(self, feed: OracleFeed) -> None:
        self.feed = feed

    @property
    def done(self) -> bool:
        return any(not ref.done and not ref.reported for ref in self.feed.refs.values())


class OracleFeed:
    """The event feed's protocol (`cluster.open_events`), answered in the driver's own thread."""

    def __init__(self) -> None:
        self.refs: dict[int, TrialRef] = {}
        self.actor = None
        self._arrivals = _Arrivals(self)

    def pending(self) -> _Arrivals:
        return self._arrivals

    def take(self, ready: list[Any]) -> list[StageReport]:
        if self._arrivals not in ready:
            return []
        out = []
        for ref in self.refs.values():
            if not ref.done and not ref.reported:
                ref.reported = True
                out.append(StageReport(ref.number, ref.step, ref.evaluation.stages[ref.step], 0.0))
        return out

    def decide(self, number: int, step: int, keep_going: bool) -> None:
        ref = self.refs[number]
        ref.stages_run = step + 1
        if keep_going and step + 1 < len(ref.evaluation.stages):
            ref.step, ref.reported = step + 1, False
        else:
            ref.done = True

    def node_health(self, lines: list[str]) -> None:
        pass

    def close(self) -> None:
        pass


class _RayError(Exception):
    pass


def _stand_ins(sweep: Sweep, launcher: Launcher, stop_at_gpu_s: float) -> tuple[Any, Any]:
    feed = OracleFeed()

    def paid(ref: TrialRef) -> None:
        ev = ref.evaluation
        pruned = ev.status is TrialStatus.OK and ref.stages_run < len(ev.stages)
        result = ev.result(ref.stages_run, node_id=NODE_ID)
        measured = None if pruned or ev.status is not TrialStatus.OK else objective_value(result, sweep.spec)
        launcher.pay(ev, stages_run=ref.stages_run, objective=measured)
        if launcher.spent_s >= stop_at_gpu_s:
            sweep.deadline = -math.inf  # the product's time budget, spent: no new launch

    def submit(request: TrialRequest, _channel: Any, node_id: str | None = None) -> TrialRef:
        ref = TrialRef(request.number, launcher.measure(request.config), paid)
        feed.refs[request.number] = ref
        return ref

    def wait(refs: list[Any], num_returns: int = 1, timeout: float | None = None) -> Any:
        ready = [r for r in refs if r.done][:num_returns]
        return ready, [r for r in refs if r not in ready]

    def get(value: Any, timeout: float | None = None) -> Any:
        return value.result() if isinstance(value, TrialRef) else value

    gpus = float(launcher.oracle.gpus)
    node = {"NodeID": NODE_ID, "Alive": True, "Resources": {"trial_slot": 1.0, "GPU": gpus}}
    fake_cluster = SimpleNamespace(
        open_events=lambda: feed,
        trial_slots=lambda: 1,
        alive_nodes=lambda: [node],
        submit=submit,
    )
    fake_ray = SimpleNamespace(
        wait=wait,
        get=get,
        cancel=lambda ref, force=False: None,
        exceptions=SimpleNamespace(RayError=_RayError),
    )
    return fake_ray, fake_cluster


@contextlib.contextmanager
def oracle_backend(sweep: Sweep, launcher: Launcher, stop_at_gpu_s: float) -> Iterator[None]:
    """Within this block `Sweep.run` runs its trials as the launcher's launches (one process, one
    thread), and stops launching once they have spent `stop_at_gpu_s`."""
    fake_ray, fake_cluster = _stand_ins(sweep, launcher, stop_at_gpu_s)
    saved = study_module.ray, study_module.cluster
    study_module.ray, study_module.cluster = fake_ray, fake_cluster
    try:
        yield
    finally:
        study_module.ray, study_module.cluster = saved


class _NoTracking:
    """MLflow stays out of the search benchmark: it measures decisions, not logging."""

    def log_trial(self, record: TrialRecord) -> str | None:
        return None


def oracle_sweep(spec: SweepSpec, n_trials: int) -> Sweep:
    """A `Sweep` on an in-memory study (the same `open_study`), ready for `run_on_oracle`."""
    # `open_study` takes a storage URL; an in-memory storage object serves as well and is much faster.
    study = open_study(spec, spec.name, cast(str, InMemoryStorage()), resume=False)
    return Sweep(
        spec, study, cast(Tracker, _NoTracking()), n_trials=n_trials, workdir=Path("unused"), sim_profile=None
    )


def run_on_oracle(sweep: Sweep, launcher: Launcher, stop_at_gpu_s: float = math.inf) -> list[TrialRecord]:
    """`prepare` then `run`, exactly as the CLI does, with the trials launched through `launcher`."""
    with oracle_backend(sweep, launcher, stop_at_gpu_s):
        sweep.prepare(resume=False)
        return sweep.run().records
