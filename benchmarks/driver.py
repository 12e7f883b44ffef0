"""The real sweep driver (`Sweep.run`) with Ray replaced by the oracle, for the search benchmark.

`Sweep.run` asks, predicts, skips, submits, reads stage reports, prunes, tells and records through two
module-level names in `orchestrator.study`: `ray` and `cluster`. For the length of one run they are
swapped for the stand-ins below, which answer at once: a "submitted" trial is the oracle's evaluation of
its configuration, its stages are reported one at a time through the event feed, and it runs the next stage
only if the driver says so, as a trial on a node does. Everything the driver decides is its own code,
unchanged; when it starts to need more of Ray than this, the stand-ins fail loudly (AttributeError).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

from optuna.storages import InMemoryStorage

import orchestrator.study as study_module
from benchmarks.oracle import Evaluation, Oracle
from orchestrator.records import TrialResult
from orchestrator.spec import SweepSpec
from orchestrator.study import Sweep, open_study
from orchestrator.tracking import Tracker, TrialRecord
from orchestrator.trial import TrialRequest
from orchestrator.trial_events import StageReport

NODE_ID = "oracle-node"


class _Remote:
    """`actor.method.remote(...)` for a plain function: called at once, its value returned as the 'ref'."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.remote = fn


class TrialRef:
    """One submitted trial: its evaluation and how far through its stages the driver has let it go."""

    def __init__(self, number: int, evaluation: Evaluation) -> None:
        self.number = number
        self.evaluation = evaluation
        self.step = 0  # the next stage to report
        self.reported = False
        self.stages_run = 0
        self.done = not evaluation.stages  # a failed start-up has nothing to report

    def result(self) -> TrialResult:
        return self.evaluation.result(self.stages_run, node_id=NODE_ID)


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


def _stand_ins(oracle: Oracle) -> tuple[Any, Any]:
    feed = OracleFeed()

    def submit(request: TrialRequest, _channel: Any, node_id: str | None = None) -> TrialRef:
        ref = TrialRef(request.number, oracle.evaluate(request.config))
        feed.refs[request.number] = ref
        return ref

    def wait(refs: list[Any], num_returns: int = 1, timeout: float | None = None) -> Any:
        ready = [r for r in refs if r.done][:num_returns]
        return ready, [r for r in refs if r not in ready]

    def get(value: Any, timeout: float | None = None) -> Any:
        return value.result() if isinstance(value, TrialRef) else value

    node = {"NodeID": NODE_ID, "Alive": True, "Resources": {"trial_slot": 1.0, "GPU": float(oracle.gpus)}}
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
def oracle_backend(oracle: Oracle) -> Iterator[None]:
    """Within this block `Sweep.run` runs its trials on the oracle (one process, one thread)."""
    fake_ray, fake_cluster = _stand_ins(oracle)
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


def oracle_sweep(spec: SweepSpec, oracle: Oracle, n_trials: int) -> Sweep:
    """A `Sweep` on an in-memory study (the same `open_study`), ready for `run_on_oracle`."""
    # `open_study` takes a storage URL; an in-memory storage object serves as well and is much faster.
    study = open_study(spec, spec.name, cast(str, InMemoryStorage()), resume=False)
    return Sweep(
        spec, study, cast(Tracker, _NoTracking()), n_trials=n_trials, workdir=Path("unused"), sim_profile=None
    )


def run_on_oracle(sweep: Sweep, oracle: Oracle) -> list[TrialRecord]:
    """`prepare` then `run`, exactly as the CLI does, with the trials answered by the oracle."""
    with oracle_backend(oracle):
        sweep.prepare(resume=False)
        return sweep.run().records
