"""The end of a sweep: its answer chosen once and handed to every place that states it.

`conclude` picks the answer (`orchestrator.driver.answer.choose.choose_answer`), writes `best.json` and
`best_command.sh`, and returns the console's lines and the MLflow parent run's metrics and tags, all from
that one answer; the report reads the same `best.json`.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path

from orchestrator.driver.answer.best_file import BEST_COMMAND, BEST_JSON, BestFile
from orchestrator.driver.answer.choose import (
    Answer,
    Call,
    answer_launches,
    baseline_launches,
    choose_answer,
    ranked_groups,
)
from orchestrator.driver.answer.confirm import relaunch_baseline
from orchestrator.driver.answer.levels import LevelCall, level_calls
from orchestrator.driver.answer.summary import render_levels, sglang_command, write_best
from orchestrator.driver.speculation.predictions import model_predictions
from orchestrator.engines.shell import shell_command
from orchestrator.mlflow_schema import TEXT_LIMIT, Tag
from orchestrator.records import TrialRecord
from orchestrator.spec.sweep_spec import SweepSpec

BEST_METRIC = "best_output_tok_per_s"  # the parent run's (and summary.json's) figure: the answer's median


@dataclass(frozen=True)
class Conclusion:
    """What the sweep answers: the best.json in force (written now, or an earlier one that stands), the
    console's lines and the files written."""

    best: BestFile | None
    lines: tuple[str, ...]
    written: tuple[Path, ...] = ()
    earlier_stands: bool = False

    def parent_metrics(self) -> dict[str, float]:
        return {BEST_METRIC: self.best.median_tok_per_s} if self.best is not None else {}

    def parent_tags(self) -> dict[str, str]:
        """The answer on the MLflow parent run: the configuration, its launches and the verdict."""
        if self.best is None:
            return {}
        speculation = "by level" if self.best.split else "off" if self.best.nospec else "on"
        return {
            Tag.ANSWER_SPECULATION.value: speculation,
            Tag.ANSWER_CONFIG.value: self.best.config_label,
            Tag.ANSWER_LAUNCHES.value: ",".join(map(str, self.best.launches)),
            Tag.ANSWER_VERDICT.value: self.best.verdict.statement[:TEXT_LIMIT],
        }


def sweep_answer(records: Sequence[TrialRecord], lossy: Collection[int] = ()) -> Answer | None:
    """The answer a sweep's records give: what `conclude` prints and writes to best.json (the search
    benchmark scores this same function). The baseline, when it ran, is a candidate; the speculation
    model fitted on every launch ranks the configurations with their own launches (`answer.ranking`)."""
    return choose_answer(
        answer_launches(records, lossy), baseline_launches(records), model_predictions(records)
    )


def answer_order(records: Sequence[TrialRecord], lossy: Collection[int] = ()) -> list[str]:
    """The speculative configurations' labels as `sweep_answer` ranks them, best first: the order the
    confirmation relaunches in. By median alone it once relaunched a runner-up lucky twice while the
    answer, ranked first by the speculation model, kept its single launch."""
    ranked = ranked_groups(
        answer_launches(records, lossy), baseline_launches(records), model_predictions(records)
    )
    return [] if ranked is None else [g.config for g in ranked[0]]


def confirmation_moot(records: Sequence[TrialRecord], lossy: Collection[int] = ()) -> bool:
    """Whether relaunching speculative configurations can no longer change the answer: it is the server
    without speculation, clearly ahead of the fastest speculative configuration on the machine both ran
    on, and speculation pays at no concurrency level (a level where it does rests its per-level answer on
    those launches). The real pair on an H100 relaunched a tree 89.8 % behind at 26.3 % noise, a launch
    another tree could have had."""
    answer = sweep_answer(records, lossy)
    if answer is None or not answer.nospec or answer.comparison is None:
        return False
    if answer.verdict.call is not Call.CLEARLY_AHEAD or relaunch_baseline(records, lossy) is not None:
        return False
    return all(level.call is not LevelCall.PAYS for level in level_calls(records, answer.comparison))


def nospec_lines(best: BestFile, lossy: int = 0, speculation_launched: bool = True) -> list[str]:
    """What the comparison with the server without speculation says, when there was one: the answer is
    that server (its verdict is the comparison), or the speculative answer stands against it. With no
    speculative configuration to compare with (``lossy``: how many changed the greedy output;
    ``speculation_launched``: whether any was launched at all), why."""
    v = best.verdict
    if best.nospec and v.call is Call.ALONE and not speculation_launched:
        # A search stopped after the baseline (a short --time-budget): nothing is known of the draft.
        return [
            "no speculative configuration was launched before the search stopped: the server without "
            "speculation is the only one measured, not an answer on speculation; continue the search "
            "with --resume"
        ]
    if best.nospec and v.call is Call.ALONE:
        why = (
            f"no speculative configuration passed the lossless check ({lossy} lossy)"
            if lossy
            else "no speculative configuration completed (the reasons are above, the server logs in MLflow)"
        )
        return [
            f"{why}: serve without speculation (the command below has no speculative flag) until the draft "
            "or the configuration is fixed, then sweep again"
        ]
    if best.nospec and v.gap is not None and v.noise is not None:
        runner = ", ".join(map(str, v.runner_up))
        # A lead within the noise is still the faster server measured; the line says how sure it is.
        close = v.call is Call.TOO_CLOSE
        margin = (
            f"within the {100 * v.noise:.1f} % noise alone opens: too close to call, and the faster one "
            "measured; a second launch of each would tell them apart"
            if close
            else f"beyond the {100 * v.noise:.1f} % noise alone opens"
        )
        return [
            f"speculation does not pay here: without it the server measured {best.median_tok_per_s:.1f} "
            f"tok/s, {100 * v.gap:.1f} % above the best speculative configuration (trial(s) {runner}, "
            f"{v.runner_up_median or 0.0:.1f} tok/s; {margin}): serve without speculation (the command "
            f"below has no speculative flag), or fix the draft and sweep again"
        ]
    if best.versus_nospec is None:
        return []
    return [f"against no speculation: {best.versus_nospec.statement}"]


def conclude(
    records: Sequence[TrialRecord],
    spec: SweepSpec,
    study_dir: Path,
    lossy: Collection[int] = (),
    earlier: BestFile | None = None,
    journal_complete: bool = True,
) -> Conclusion:
    """Choose the answer among ``records`` (this invocation's and, on --resume, the journal's) and write
    it. ``earlier`` is the best.json an earlier invocation left: with every earlier launch in the journal
    the new answer is the study's; without, the earlier one stands unless a launch now beat it."""
    answer = sweep_answer(records, lossy)
    if (
        earlier is not None
        and not journal_complete
        and (answer is None or answer.median < earlier.median_tok_per_s)
    ):
        return Conclusion(
            earlier,
            (
                f"\n{earlier.headline()} (an earlier invocation's answer): nothing launched now beat it, so "
                f"{study_dir / BEST_JSON} and {BEST_COMMAND} are unchanged",
            ),
            earlier_stands=True,
        )
    if answer is None and lossy:
        # The baseline is the answer only against a speculative configuration it beat; none is left.
        return Conclusion(
            None,
            (
                f"no speculative configuration passed the lossless check ({len(lossy)} lossy): keep "
                f"serving without speculation until the draft is fixed; no {BEST_JSON} is written",
            ),
        )
    if answer is None:
        return Conclusion(
            None,
            ("no speculative configuration completed; see the reasons above and the server logs in MLflow",),
        )
    trusted = [r for r in records if r.number not in lossy]
    best, written = write_best(answer, trusted, spec, study_dir)
    representative = next(r for r in records if r.number == best.trial)
    lines = (
        f"\n{best.headline()}",
        *nospec_lines(best, len(lossy), any(r.result.config.speculative for r in records)),
        f"confidence: {best.verdict.statement}",
        *filter(None, [best.node_note]),
        render_levels(best),
        f"SGLang launch command (also in {study_dir / BEST_COMMAND}):",
        shell_command(sglang_command(representative, spec)),
    )
    return Conclusion(best, lines, tuple(written))
