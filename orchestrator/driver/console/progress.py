"""What the sweep prints while it runs: on a terminal one live line (counts, best, each running trial's
phase and elapsed seconds) redrawn in place; anywhere else (`make sweep > file`, CI) one plain line per
event, trial started, phase changed, trial finished, so that a log file shows the progress too."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable

from orchestrator.driver.answer.summary import cut_at_word
from orchestrator.driver.loop.outcome import Progress
from orchestrator.mlflow_schema import Lossless, Tag
from orchestrator.records import TrialRecord, TrialStatus
from orchestrator.trial_events import PhaseEvent

Write = Callable[[str], None]
REASON_WIDTH = 80  # characters of a failure's reason on its progress line


class ProgressPrinter:
    def __init__(self, n_trials: int, tty: bool, write: Write, now: Callable[[], float] = time.time) -> None:
        self.n_trials = n_trials
        self.tty = tty
        self.write = write  # writes its text as is: the printer adds "\r" and "\n" itself
        self.now = now
        self._told: dict[int, str] = {}  # trial number -> the phase last printed (not on a terminal)
        # The shortest form the live line has needed at this width: it keeps it while the phases grow
        # and shrink, or the counts flicker in and out from one redraw to the next.
        self._form = (0, 0)  # (terminal width, form index)

    def show(self, p: Progress) -> None:
        if self.tty:
            self.write("\r" + self.live_line(p))
            return
        # Each event in the order it came, for a trial still running (not one a later record ended).
        events, p.unshown[:] = [e for e in p.unshown if e.number in p.phases], []
        for event in events:
            number, what = event.number, event.describe()
            if self._told.get(number) == what:
                continue
            since = event.at_unix - event.started_unix
            if number not in self._told:
                node = f" on node {event.node_id[:12]}" if event.node_id else ""
                self.write(f"  trial {number:3d} started{node}: {what}\n")
            else:
                self.write(f"  trial {number:3d} {what} (at {since:.1f} s)\n")
            self._told[number] = what

    def live_line(self, p: Progress) -> str:
        """The line as wide as the terminal allows. Where the whole does not fit, the shorter forms go
        first: the running trials' phases and seconds are what the line is watched for (at 80 columns
        the counts and the best's name once left "trial 0 benchmarki")."""
        name = p.best_name or f"trial {p.best_number}"
        tok = f"{p.best_tok_s:.1f} tok/s" if p.best_tok_s else "-"
        running = "; ".join(_running(n, e, self.now()) for n, e in sorted(p.phases.items()))
        # Without the name, a median still says it is one: it falls when a relaunch measures less.
        best = "best median" if p.best_tok_s and p.best_launches > 1 else "best"
        forms = [
            f"  [{p.done}/{self.n_trials} done, {p.running} running, {p.pruned_oom} pruned for OOM, "
            f"{p.failed} failed] best {tok}{f' ({name})' if p.best_tok_s else ''}",
            f"  [{p.done}/{self.n_trials} done, {p.running} running, {p.pruned_oom} OOM, {p.failed} failed] "
            f"{best} {tok}",
            f"  [{p.done}/{self.n_trials} done] {best} {tok}",
        ]
        width = max(shutil.get_terminal_size((120, 24)).columns - 1, 40)
        lines = [f"{form} | {running}" if running else form for form in forms]
        fits = next((i for i, text in enumerate(lines) if len(text) <= width), len(lines) - 1)
        kept = self._form[1] if self._form[0] == width else 0
        self._form = (width, max(fits, kept))
        return lines[self._form[1]][:width].ljust(width)

    def record(self, r: TrialRecord) -> None:
        self._told.pop(r.number, None)
        res = r.result
        tok = f"{res.output_tok_per_s:8.1f} tok/s" if res.output_tok_per_s else " " * 14
        msg = f"  trial {r.number:3d} {res.status.value:<14} {tok}  {res.config.label()}"
        if res.failure is not None and res.status is not TrialStatus.OK:
            # A server's words are cut at a word, marked as cut (a reason cut mid-word reads as another
            # word); an interrupted trial's are the driver's own, whose end says what became of it: whole.
            whole = res.status is TrialStatus.INTERRUPTED
            reason = res.failure.message if whole else cut_at_word(res.failure.message, REASON_WIDTH)
            msg += f"  [{res.failure.stage.value}: {reason}]"
        if r.diagnosis.startswith("broken_speculation"):
            msg += "\n  !!! BROKEN SPECULATION: " + r.diagnosis
        if r.tag(Tag.LOSSLESS) == Lossless.MISMATCH:
            msg += "\n  !!! LOSSY SPECULATION (output differs from the baseline at temperature 0): "
            msg += r.tag(Tag.LOSSLESS_DETAIL) or ""
        elif r.tag(Tag.LOSSLESS) == Lossless.NEAR_TIE:
            msg += "\n  near tie (numerics, not lossy): " + (r.tag(Tag.LOSSLESS_DETAIL) or "")
        # On a terminal the line overwrites the live one, which is as wide as the terminal: pad to that.
        width = max(shutil.get_terminal_size((120, 24)).columns - 1, 40) if self.tty else 0
        self.write(("\r" if self.tty else "") + msg.ljust(width) + "\n")


def _running(number: int, event: PhaseEvent, now: float) -> str:
    return f"trial {number} {event.describe()} {max(now - event.started_unix, 0.0):.0f}s"
