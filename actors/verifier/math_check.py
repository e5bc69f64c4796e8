"""Math answer checking for the training-time verifier: the shared check, run in killable worker processes.

The check itself is `sandbox.math_answer.check_answer` (one implementation with the dataset labeler,
`driver.data.verify`), and the worker processes are `sandbox.workers.ProcessPool`. Why processes: math-verify
bounds every parse and comparison with `signal.alarm`, which only works in a process's main thread -- in a
threaded or async Ray actor it raises `ValueError`, and code that swallowed that error scored every answer 0
without a trace (a known failure mode of public RL systems). Each worker runs the check in its own main thread, and
the pool's outer wall deadline kills and replaces a worker whose computation never returns to the interpreter
(a huge integer power inside sympy).

Here math-verify's own timeouts stay on (`math_timeout`: a quarter of the outer deadline), raised rather than
swallowed, so a slow parse usually ends as a clean "timeout" verdict before the outer deadline has to kill the
process. `check_answer(answer, reference, timeout_s) -> Verdict` is the default check; any picklable top-level
function with that signature can replace it (tests inject one that hangs or raises).
"""
from __future__ import annotations

from typing import Callable

from sandbox.math_answer import ERROR, OK, TIMEOUT, Verdict, check_answer, warm_up
from sandbox.workers import Outcome, ProcessPool


def run_check(fn: Callable, answer: str, reference: str, timeout_s: int) -> Verdict:
    """Call a check function and insist on a Verdict (runs inside the worker process)."""
    verdict = fn(answer, reference, timeout_s)
    if not isinstance(verdict, Verdict):
        raise TypeError(f"check function returned {type(verdict).__name__}, expected Verdict")
    return verdict


def math_timeout(outer_deadline_s: float) -> int:
    """math-verify's own per-step timeout (whole seconds for `signal.alarm`): a quarter of the outer deadline,
    at least 1 s, so that a slow parse or comparison usually ends as a clean "timeout" verdict before the
    outer deadline has to kill the process."""
    return max(1, int(outer_deadline_s // 4))


__all__ = ["Verdict", "check_answer", "ProcessPool", "Outcome", "run_check", "warm_up", "math_timeout",
           "OK", "TIMEOUT", "ERROR"]
