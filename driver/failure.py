"""How a run that cannot go on says so: `RunFailed` with what failed, why, and how to continue."""
from __future__ import annotations

from pathlib import Path

from driver import checkpoint as ckpt


class RunFailed(RuntimeError):
    """The run cannot go on (a learner died, a deadline passed); the message says how to continue."""


def error_summary(err: BaseException, limit: int = 300) -> str:
    """`Type: first line` of a Ray error, plus its root cause when the text ends in one (an actor whose
    `__init__` raised carries the traceback, and its last line is the exception that killed it: without it a
    start-up failure says only "died in its creation task")."""
    lines = [l.strip() for l in str(err).splitlines() if l.strip()]
    head = lines[0][:limit] if lines else ""
    cause = lines[-1][:limit] if len(lines) > 1 else ""
    return f"{type(err).__name__}: {head}" + (f" ... caused by {cause}" if cause and cause != head else "")


def how_to_continue(run_dir: Path) -> str:
    """Where the run can resume from, and the command: the end of every RunFailed message."""
    last = ckpt.latest(run_dir)
    where = f"the last checkpoint is {last}" if last else "no checkpoint was written yet"
    return f"{where}; rerun the same command (resume=auto) to continue"
