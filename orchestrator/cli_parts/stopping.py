"""How a sweep's driver stops when asked to (Ctrl-C, SIGTERM), and the command that continues its study.

SIGTERM raises `Terminated` (`stop_on_sigterm`), so that it stops the driver as cleanly as Ctrl-C: in the
search (`search_and_confirm`) what the driver holds is closed, and `resume_command` is printed.
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import sys
from types import FrameType
from typing import TYPE_CHECKING

from orchestrator.cli_parts.parser import build_parser
from orchestrator.driver.store.commands import module_command

if TYPE_CHECKING:
    from orchestrator.driver.loop.outcome import SweepOutcome
    from orchestrator.driver.loop.sweep import Sweep
    from orchestrator.driver.store.study_lock import DriverLease
    from orchestrator.driver.store.tracking import Tracker


class Terminated(KeyboardInterrupt):
    """SIGTERM (batch systems, `timeout`, `kill`): stop as cleanly as Ctrl-C does."""


TERMINATED = {"seen": False}  # Ray may re-raise the interrupt as a plain KeyboardInterrupt
# A Ctrl-C seen, and whether the search had begun when it came: an interrupt raised inside a library's
# callback can be swallowed there (once, during Ray's start, the whole sweep then ran), so the driver also
# checks the record before its search starts.
INTERRUPT = {"seen": False, "searching": False}


def record_interrupts() -> None:
    """SIGINT raises KeyboardInterrupt as by default, and is recorded (`interrupt_requested`)."""

    def handler(signum: int, frame: FrameType | None) -> None:
        INTERRUPT["seen"] = True
        raise KeyboardInterrupt()

    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # not when the shell ignores it
        signal.signal(signal.SIGINT, handler)


def interrupted_message(args: argparse.Namespace, study: str, terminated: bool = False) -> str:
    """What a Ctrl-C (or SIGTERM, ``terminated``) outside the search says: before it, nothing was
    launched; after it, every trial is recorded and the answer is written again by resuming."""
    why = "terminated (SIGTERM)" if terminated else "interrupted"
    if not INTERRUPT["searching"]:
        return f"\n{why} during set-up: no trial was launched; run the same command to start again"
    return (
        f"\n{why} after the search: every trial is recorded; to write the answer again:\n  "
        + resume_command(args, study)
    )


def _terminate(signum: int, frame: FrameType | None) -> None:
    TERMINATED["seen"] = True
    raise Terminated()


def stop_on_sigterm() -> None:
    """SIGTERM raises `Terminated`, which ends the driver as Ctrl-C does. Called at the start, once Ray
    has started (`ray.init` puts its own handler in place: exit status 15, not a word said) and as the
    search begins."""
    signal.signal(signal.SIGTERM, _terminate)


def under_make() -> bool:
    """Whether `make` started this process (`make sweep`, `make report`): the commands it prints are then
    make's, since make passes flags only through ARGS (and its python is the venv's)."""
    return bool(os.environ.get("MAKELEVEL"))


def _sweep_argv(args: argparse.Namespace, study: str) -> list[str]:
    """The spec, the study and the flags that find this run's stores and cluster."""
    argv = [args.spec, "--study", study]
    default_out = build_parser().get_default("out")
    if args.out != default_out:
        argv += ["--out", args.out]
    for flag in ("tracking_uri", "storage", "ray_address"):
        if getattr(args, flag) is not None:
            argv += ["--" + flag.replace("_", "-"), getattr(args, flag)]
    if args.time_budget is not None:
        argv += ["--time-budget", f"{args.time_budget:g}"]
    argv += ["--no-dashboard"] if args.no_dashboard else []
    argv += ["-v"] if args.verbose else []
    return argv


def _sweep_command(argv: list[str]) -> str:
    if under_make():  # started by `make sweep`, whose python is the venv's
        return "make sweep ARGS=" + shlex.quote(shlex.join(argv))
    # The interpreter that runs this sweep: a bare `python` may be another one, without its packages.
    return module_command("orchestrator.sweep", *argv)


def resume_command(args: argparse.Namespace, study: str | None = None, trials: int | None = None) -> str:
    """The whole command that continues this run's study: a bare `--resume` continues the spec's own
    study (its `name`), not the one `--study` named, and the stores are found by --out, --storage and
    --tracking-uri. The budget is the study's own (a plain --resume keeps it): --trials only when
    ``trials`` asks for a larger one; --warm-start seeds new studies only."""
    argv = _sweep_argv(args, study or args.study)
    argv += ["--resume", *(["--trials", str(trials)] if trials is not None else [])]
    return _sweep_command(argv)


def new_study_command(args: argparse.Namespace) -> str:
    """The same run under a new study name (NEW_NAME, for the user to choose), with its own --trials."""
    argv = _sweep_argv(args, "NEW_NAME")
    argv += ["--trials", str(args.trials)] if args.trials is not None else []
    return _sweep_command(argv)


def search_and_confirm(
    sweep: Sweep, tracker: Tracker, lease: DriverLease, args: argparse.Namespace
) -> SweepOutcome | int:
    """Run the search and the confirmation; on Ctrl-C or SIGTERM the exit code, once what this driver
    holds is closed: its trials (`Sweep.run`: interrupted, re-queued), its lease, and its MLflow parent
    run (KILLED, with the reason as a tag; FAILED if the driver itself raised), and the command that
    continues has been printed."""
    from orchestrator.driver.store.tracking import RunStatus  # mlflow: once a sweep runs
    from orchestrator.mlflow_schema import Tag

    ended: tuple[RunStatus, str] | None = (RunStatus.FAILED, "the driver raised")
    stop_on_sigterm()
    try:
        INTERRUPT["searching"] = True
        if INTERRUPT["seen"] or TERMINATED["seen"]:  # a signal during set-up that a library swallowed
            raise Terminated() if TERMINATED["seen"] else KeyboardInterrupt()
        sweep.run()
        outcome = sweep.confirm_best()
        ended = None
    except KeyboardInterrupt as err:
        term = isinstance(err, Terminated) or TERMINATED["seen"]
        why = "terminated (SIGTERM)" if term else "interrupted"
        ended = (RunStatus.KILLED, f"{why}: the user stopped the driver")
        print(
            f"\n{why}: finished trials are recorded, running ones closed and queued again (not counted); "
            f"to continue:\n  {resume_command(args, tracker.experiment_name)}",
            file=sys.stderr,
        )
        return 143 if term else 130
    finally:
        lease.release()
        tracker.flush_spool()
        if tracker.pending_spool():
            print(
                f"warning: {tracker.pending_spool()} trial(s) still spooled in {tracker.spool_dir}; "
                "they are written on the next run",
                file=sys.stderr,
            )
        if ended is not None:
            status, reason = ended
            tracker.finish({}, [], status=status, tags={Tag.CLOSED_REASON.value: reason})
    return outcome
