"""Every Optuna attribute name the product writes or reads, in one place.

A trial's user attributes are the study's own record of what happened (the end-of-run table, --resume
and the benchmarks read them back); a typo in one of these names silently loses that record, so they
are members of an enum, never string literals.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any


class TrialAttr(StrEnum):
    """Names of a trial's user attributes."""

    STATUS = "status"  # a TrialStatus value
    CONFIG = "config"  # the configuration's label
    NODE_ID = "node_id"
    OUTPUT_TOK_PER_S = "output_tok_per_s"
    FAILURE = "failure"  # "stage/kind: message"
    FAILURE_STAGE = "failure_stage"
    MEMORY = "memory"  # the memory account, so a resumed driver can rebuild its memory model
    RESOLVED_MEM_FRACTION = "resolved_mem_fraction_static"
    BASELINE = "baseline"  # the no-speculation reference: its first launch costs no budget
    KNOWN_GOOD = "known_good"  # enqueued by the user: launched even when the model predicts an OOM
    KNOWN_GOOD_FRACTION = "known_good_fraction"  # the user's fraction, when the prior moved it down
    REQUEUED_FROM = "requeued_from"  # a lost or interrupted trial's configuration, run again
    REPEAT_OF = "repeat_of"  # answered from an earlier trial's record, not launched
    WAITS_FOR = "waits_for"  # drawn while this trial ran its server on another node (`driver.loop.twins`)
    WARM_START_FROM = "warm_start_from"  # a trial of an earlier study, added by --warm-start
    CLOSED = "closed"  # closed without a result (interrupted): its configuration is re-queued
    CONFIRM_OF = "confirm_of"  # a confirmation launch of the configuration first measured by this trial
    BEST_SO_FAR = "_best_so_far"  # the intermediate value the pruner sees: best stage tok/s so far
    MACHINE = "machine"  # its GPUs' NVML UUIDs (`records.machine_of`), told by the node's GPU check
    PRUNE_WITHIN = "_prune_within"  # the machine whose launches alone the pruner compares it with


def free_reference(baseline: bool, confirm_of: object | None) -> bool:
    """The baseline's first launch: a reference, it costs no budget. A race's repeat of it (its
    ``confirm_of`` set) is paid like any launch: the budget, `launched_count`, and the progress the
    console and --resume show all count by this one rule."""
    return baseline and confirm_of is None


def requeued_attrs(number: int, attrs: Mapping[str, Any]) -> dict[str, Any]:
    """The attributes of trial ``number``'s configuration queued again (it was lost or interrupted): it
    says so, and keeps what it was: the baseline, and a confirmation launch (never cut by the pruner,
    tagged as the confirmation's in MLflow, counted among its launches, paid where it repeats the
    baseline). Queued again without its ``confirm_of``, a confirmation launch a killed driver left
    was a search launch to the driver that resumed the study."""
    out: dict[str, Any] = {TrialAttr.REQUEUED_FROM: number}
    if attrs.get(TrialAttr.BASELINE):
        out[TrialAttr.BASELINE] = True
    if TrialAttr.CONFIRM_OF in attrs:
        out[TrialAttr.CONFIRM_OF] = attrs[TrialAttr.CONFIRM_OF]
    return out


class StudyAttr(StrEnum):
    """Names of the study's user attributes."""

    SPEC_NAME = "spec_name"
    DRIVER = "driver"  # the lease: a DriverStamp as a dict, or None once released
    CLOSED_TRIALS = "closed_trials"  # {trial number: why} for trials closed on a dead driver's behalf
    MLFLOW_RUNS = "mlflow_runs"  # the MLflow parent run of every invocation: the next closes a dead one's
    BUDGET_TRIALS = "budget_trials"  # the trial budget it was last run with: --resume keeps it
    # The launches it had when its confirmation needed no more (`study.mark_settled`): done with fewer
    # launches than its budget, so a run on the same budget has nothing to launch.
    SETTLED_AT = "settled_at"
    # The sweep's answer as best.json holds it (Optuna's best trial is the single highest launch; the
    # answer is a configuration's median over its launches): shown among the dashboard's study attributes.
    ANSWER_TRIALS = "answer_trials"
    ANSWER_TOK_PER_S = "answer_tok_per_s"
    ANSWER_CONFIG = "answer_config"
    ANSWER_NOTE = "answer_note"
