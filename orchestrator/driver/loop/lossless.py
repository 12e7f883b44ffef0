"""The lossless check: at temperature 0, speculative decoding must not change a single output token.

With ``budget.baseline: true`` every trial that got through its benchmark also generates a fixed small
set of the workload's prompts, greedily, and returns the output ids (orchestrator.bench.greedy). The
baseline (no speculation) is the reference; each speculative trial is compared with it token by token.
A difference means the speculative path is lossy (a draft path bug, a quantisation mismatch) and is
flagged loudly: logged as an error, tagged on the trial's MLflow run and shown in the report. One
exception: where the server scored the baseline's top two log-probabilities (`ServerApi.greedy_margins`)
and every differing prompt first differs at a position where those two were within `NEAR_TIE_NATS` and
the trial took the baseline's second choice, the difference is bf16 rounding in the verify pass (it sums
over another batch shape than the plain decode), not a lossy draft: verdict ``near_tie``, a warning, and
the trial stays eligible. A prompt without margins keeps the strict rule. A trial that finishes before
the baseline is compared when the baseline arrives, and its run is tagged then.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from orchestrator.bench.greedy import NEAR_TIE_NATS, check_requests, compare
from orchestrator.driver.store.tracking import Tracker
from orchestrator.mlflow_schema import TEXT_LIMIT, Lossless, Tag
from orchestrator.records import Margin, TrialRecord
from orchestrator.spec.sweep_spec import SweepSpec

log = logging.getLogger(__name__)


class LosslessCheck:
    """Holds the baseline's outputs and compares every speculative trial with them."""

    def __init__(self, spec: SweepSpec, tracker: Tracker) -> None:
        self.enabled = spec.budget.baseline
        self.requests = check_requests(spec) if self.enabled else []
        self.tracker = tracker
        self.reference: tuple[tuple[int, ...], ...] | None = None
        self.margins: tuple[tuple[Margin | None, ...], ...] = ()  # the baseline's, per prompt
        self.waiting: list[TrialRecord] = []  # speculative trials that finished before the baseline
        self.lossy: set[int] = set()  # trial numbers whose output differed: never recommended

    def review(self, record: TrialRecord) -> TrialRecord:
        """The record with its verdict among its tags (when it can be judged now)."""
        outputs = record.result.greedy_outputs
        if not self.enabled or not outputs:
            return record
        if record.baseline or not record.result.config.speculative:
            if record.baseline and self.reference is None:
                self.reference, self.margins = outputs, record.result.greedy_margins
                for waiting in self.waiting:
                    self._judge_late(waiting)
                self.waiting.clear()
            return record
        if self.reference is None:
            self.waiting.append(record)
            return record
        # Judged now, the verdict rides on the record: the trial's console line tells a near tie.
        return replace(record, extra_tags=record.extra_tags + self._verdict(record, on_console=True))

    def restore(self, records: list[TrialRecord]) -> list[TrialRecord]:
        """--resume: the baseline's outputs come back from the journal and every speculative trial is
        judged again from the outputs it kept (a verdict is derived, and the rule may have changed since:
        a changed one is logged and its MLflow tag corrected); a trial still waiting for the baseline is
        judged when it arrives. Returns the records with their verdicts as they stand now."""
        for record in records:
            if record.baseline and record.result.greedy_outputs and self.reference is None:
                self.reference, self.margins = record.result.greedy_outputs, record.result.greedy_margins
        return [self._restored(record) for record in records]

    def _restored(self, record: TrialRecord) -> TrialRecord:
        said = dict(record.extra_tags).get(Tag.LOSSLESS.value)
        judged = self.enabled and not record.baseline and bool(record.result.greedy_outputs)
        if not judged or self.reference is None:
            if said == Lossless.MISMATCH:
                self.lossy.add(record.number)
            elif judged and said is None:
                self.waiting.append(record)
            return record
        if said is None:
            self._judge_late(record)
            return record
        tags = self._verdict(record, announce=False)
        now = dict(tags)[Tag.LOSSLESS.value]
        if now == said:
            return record
        log.warning(
            "trial %d (%s): lossless verdict %s, was %s when it ran (the check's rule has changed since)",
            record.number,
            record.result.config.label(),
            now,
            said,
        )
        self._tag(record.number, tags)
        verdict_keys = {Tag.LOSSLESS.value, Tag.LOSSLESS_DETAIL.value}
        kept = tuple((k, v) for k, v in record.extra_tags if k not in verdict_keys)
        return replace(record, extra_tags=kept + tags)

    def _verdict(
        self, record: TrialRecord, announce: bool = True, on_console: bool = False
    ) -> tuple[tuple[str, str], ...]:
        """The verdict's tags, logged. A near tie is numerics, not news: a warning only where no console
        line tells it (a trial judged after its line was printed, when the baseline came later)."""
        assert self.reference is not None
        found = compare(self.requests, self.reference, record.result.greedy_outputs, self.margins)
        if not found:
            return ((Tag.LOSSLESS.value, Lossless.OK.value),)
        text = "; ".join(m.describe() for m in found)
        differ = f"{len(found)} of {len(self.requests)} prompts differ from the baseline at temperature 0"
        label = f"trial {record.number} ({record.result.config.label()})"
        if all(m.near_tie for m in found):
            verdict, level = Lossless.NEAR_TIE, logging.INFO if on_console else logging.WARNING
            message = (
                f"{label}: {differ}, each at a near tie (the baseline's second choice within "
                f"{NEAR_TIE_NATS:g} nats): numerics, not lossy: {text}"
            )
        else:
            self.lossy.add(record.number)
            verdict, level = Lossless.MISMATCH, logging.ERROR
            message = f"!!! LOSSY SPECULATION in {label}: {differ}: {text}"
        # On --resume a verdict already given is judged again quietly: only a changed one is news.
        log.log(level if announce else logging.DEBUG, "%s", message)
        return ((Tag.LOSSLESS.value, verdict.value), (Tag.LOSSLESS_DETAIL.value, text[:TEXT_LIMIT]))

    def _judge_late(self, record: TrialRecord) -> None:
        self._tag(record.number, self._verdict(record))

    def _tag(self, number: int, tags: tuple[tuple[str, str], ...]) -> None:
        run_id = self.tracker.run_id_of(number)
        if run_id is None:
            log.warning("lossless verdict for trial %d not recorded: its run is not in MLflow yet", number)
            return
        for key, value in tags:
            self.tracker.client.set_tag(run_id, key, value)
